"""The ``neuron`` engine's classification of the Neuron and vLLM-Neuron environment variables.

Every name vLLM-Neuron 0.24's ``vllm_neuron/envs.py`` defines (read in two independent copies:
AWShtokoyo/vllm-neuron @eabd4c9f and the LNL-era jinhuang12/vllm-neuron @0bae3e9c, fidelity rows
A8, A10, A11, B11, C5), the ``NEURON_LIBTORCH_*`` names of libtorch-neuronx-lite (closed; known from
the SDK 2.32 docs and kiln's measurements, rows A7, A10, B8, C4, C6) and the Neuron SDK's own is in
:data:`NEURON_ENV`. vLLM-Neuron hashes no variable directly; a variable matters when it changes a
graph, its inputs or the compiler's arguments, which makes it keyed. A name in
:data:`NEURON_PREFIXES` that is not in the table is keyed too (a fork or a newer release may read
it to change a graph; passing it through unkeyed would serve a miss), or dropped when it holds a
path (a path never enters a key). vLLM's own variables are classified as for every engine
(:func:`~neuronbuild.engines.env_classes.classify_vllm_env`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from neuronbuild.engines.env_classes import EnvClass
from neuronbuild.engines.neuron.cc_flags import normalise_cc_flags

if TYPE_CHECKING:
    from neuronbuild.engines.neuron.releases import Rules

KEYED, LOCAL, DROPPED, REFUSED = (
    EnvClass.KEYED,
    EnvClass.NODE_LOCAL,
    EnvClass.DROPPED,
    EnvClass.REFUSED_AT_SERVE,
)

NEURON_PREFIXES = ("VLLM_NEURON_", "NEURON_LIBTORCH_")
"""The plugin's and libtorch-neuronx-lite's prefixes: an unlisted name in them is keyed."""

NEURON_ENV: dict[str, EnvClass] = {
    # Compiler flags enter neuronx-cc's arguments, which are in every NEFF key.
    "NEURON_CC_FLAGS": KEYED,
    # Logical NeuronCore config: changes the compiler's --lnc, hence every NEFF.
    "NEURON_LOGICAL_NC_CONFIG": KEYED,
    # The KV budget: sets KV num_blocks, a graph input shape (fidelity row B15).
    "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION": KEYED,
    "VLLM_NEURON_MIN_KV_BUDGET_GIB": KEYED,
    "VLLM_NEURON_DEVICE_GRAPH_RESERVE_GIB": KEYED,
    # Choose the compile route (keyed as the route it resolves to: normalise_neuron_env) and the
    # kernels inside each graph.
    "VLLM_NEURON_BACKEND": KEYED,
    "VLLM_NEURON_LIBTORCH_NEURONX_LITE": KEYED,
    "VLLM_NEURON_DISABLE_NKI_KERNELS": KEYED,
    "VLLM_NEURON_KERNEL_DEVICE_DUMP": KEYED,
    # The Precompile Cache on or off: it saves the trace, "The result does not change, because
    # the reused graph is the same graph the first start compiled" (how-to-precompile-cache.md,
    # v2.33.0, 2026-10-13): the node's choice.
    "TORCH_CACHING_PRECOMPILE": LOCAL,
    # Change the HLO itself (row B11): input dedup off adds HLO parameters (compile/backend.py
    # preprocess_and_validate_inputs), NeuronSwitch collectives change the replica groups, debug
    # mode traces with fullgraph=False (neuron_model_runner.py load_model); the instance family
    # overrides the one sysfs gives, which picks the collective topology.
    "VLLM_NEURON_DISABLE_INPUT_DEDUP": KEYED,
    "VLLM_NEURON_SWITCH_CC": KEYED,
    "VLLM_NEURON_DEBUG_MODE": KEYED,
    "VLLM_NEURON_EFA_INSTANCE_FAMILY": KEYED,
    # How fast, how loud and where a process runs: never what it compiles. The trace pool
    # (row A11) forks extraction children; each traces the same graph.
    "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS": LOCAL,
    "VLLM_NEURON_PARALLEL_COMPILE_WORKERS": LOCAL,
    "VLLM_NEURON_PARALLEL_TRACE_WORKERS": LOCAL,
    "VLLM_NEURON_DISABLE_PARALLEL_TRACE": LOCAL,
    "NEURON_LIBTORCH_COMPILATION_TIMEOUT": LOCAL,
    "VLLM_NEURON_COMPILATION_TIMEOUT": LOCAL,
    "VLLM_NEURON_BARRIER_TIMEOUT": LOCAL,
    "VLLM_NEURON_WORKER_TERMINATION_TIMEOUT": LOCAL,
    "VLLM_NEURON_EPD_RENDERER_WORKERS": LOCAL,
    "VLLM_NEURON_GC_POLICY": LOCAL,
    "VLLM_NEURON_NEFF_LOAD_WAVE_SIZE": LOCAL,
    "VLLM_NEURON_NEFF_LOAD_SIGNAL_DIR": LOCAL,
    "VLLM_NEURON_NEFF_LOAD_WAIT_TIMEOUT": LOCAL,
    "VLLM_NEURON_LOG_LEVEL": LOCAL,
    "VLLM_NEURON_CHECKPOINT_CACHE": LOCAL,
    "VLLM_NEURON_GOLDEN_CACHE_DIR": LOCAL,
    "VLLM_NEURON_S3_GOLDENS_URI": LOCAL,
    "NEURON_RT_LOG_LEVEL": LOCAL,
    "NEURON_RT_VISIBLE_CORES": LOCAL,
    # "Fail on a miss" (rows C1, C6): serve sets both release's names, compile strips them.
    "VLLM_NEURON_ASSERT_CACHE_HIT": LOCAL,
    "NEURON_LIBTORCH_ASSERT_CACHE_HIT": LOCAL,
    # Set by neuronbuild at compile and serve; the engine's value replaces the user's. LNL used
    # directly roots its cache at NEURON_LIBTORCH_CACHE_ROOT (row B8), so it is pinned to the
    # same root as VLLM_CACHE_ROOT: the scratch root at compile, the layout at serve.
    "VLLM_NEURON_DISABLE_WARMUP_COMPILE": LOCAL,
    "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND": LOCAL,
    "NEURON_LIBTORCH_CACHE_ROOT": LOCAL,
    # Other caches and phase switches: the compile chooses its own phases and store. The
    # pre-LNL capture switch would make a compile extract nothing.
    "NEURON_LIBTORCH_REMOTE_CACHE": DROPPED,
    "VLLM_NEURON_REMOTE_CACHE": DROPPED,
    "VLLM_NEURON_DISABLE_GRAPH_CAPTURE_BACKEND": DROPPED,
    "NEURON_COMPILED_ARTIFACTS": DROPPED,
    "NEURON_COMPILE_CACHE_URL": DROPPED,
    "VLLM_NEURON_SKIP_PREFILL_WARMUP": DROPPED,
    "VLLM_NEURON_SKIP_DECODE_WARMUP": DROPPED,
    "VLLM_NEURON_SKIP_PREFILL_DECODE_WARMUP": DROPPED,
    "VLLM_NEURON_SKIP_ENCODER_WARMUP": DROPPED,
    # Other tools' switches a compile host may have set (internals, prior art): optimum-neuron's
    # hub cache bucket, and torch-neuronx's graph-extraction-only run for neuron_parallel_compile.
    "NEURON_CACHE_BUCKET": DROPPED,
    "NEURON_PARALLEL_COMPILE": DROPPED,
    # On a node these would build on the spot or mis-target: the compile host sets them itself.
    "NEURON_PLATFORM_TARGET_OVERRIDE": REFUSED,
    "VLLM_NEURON_CPU_COMPILE": REFUSED,
    "VLLM_NEURON_CPU_MODE": REFUSED,
    "NEURON_LIBTORCH_DISABLE_COMPILE_CACHE": REFUSED,
    "VLLM_NEURON_DISABLE_COMPILE_CACHE": REFUSED,
    "NEURON_RT_ALLOW_LEGACY_NEFF": REFUSED,
}
"""Every Neuron variable the plugin's ``envs.py`` and the SDK docs name, with its class for the
``neuron`` engine."""

NEURON_ENV_PREFIXES = tuple((prefix, KEYED) for prefix in NEURON_PREFIXES)
"""The engine's prefix classes (:attr:`Engine.env_prefix_classes`)."""

DEFAULT_LNC = {"trn1": "1", "inf2": "1", "trn2": "2", "trn3": "2"}
"""``NEURON_LOGICAL_NC_CONFIG`` when unset, per target: neuronx-cc's ``--logical-nc-config``
"(Only available on trn2; Default: 2)", trn1 "only lnc=1 is supported" (NCC_EARG001), and
vllm-neuron's ``_DEFAULT_LNC_CONFIG = 2`` "for current Trainium chips"
(``utils/hardware_config.py``; all as quoted by kiln ``docs/research/trn2-trn3.md`` section 3.2 @
a04d1fab)."""

FLAGS = frozenset(
    {
        "VLLM_NEURON_DISABLE_NKI_KERNELS",
        "VLLM_NEURON_KERNEL_DEVICE_DUMP",
        "VLLM_NEURON_DISABLE_INPUT_DEDUP",
        "VLLM_NEURON_SWITCH_CC",
        "VLLM_NEURON_DEBUG_MODE",
    }
)
"""Keyed switches vLLM-Neuron reads as ``bool(int(value))``, default off (``maybe_convert_bool``
in ``envs.py``): ``0`` is the same as unset, ``01`` the same as ``1``."""


FLOATS = {"VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION": 0.30, "VLLM_NEURON_MIN_KV_BUDGET_GIB": 1.0}
"""Keyed variables the plugin reads as a float, with their defaults ("Configuration options",
Memory management, vLLM-Neuron docs updated 2026-08-13: shared/reference/
vllm-neuron-configuration.md): ``0.3``, ``0.30`` and `` 0.3`` are one value."""


def normalise_neuron_env(name: str, value: str, target: str | None, rules: Rules) -> str | None:
    """The keyed ``value`` of ``name`` as vLLM-Neuron resolves it, so that spellings it treats
    alike give one key: None where it equals the default (as if unset), ``"1"`` / ``"0"`` for a
    switch, a number in one spelling (:data:`FLOATS`, the logical NeuronCore config), compiler
    flags in one spelling (:func:`~.cc_flags.normalise_cc_flags`), the value unchanged otherwise
    (and whenever the plugin would reject it: the run then fails the same way at compile).
    ``target``: the recipe's (None: no target default applies); ``rules``: its release's, for
    ``VLLM_NEURON_BACKEND`` (a value naming the release's default route is the default:
    ``neuron_native`` and ``neuron`` under 0.29; a release whose values are unpublished keeps
    every value as set)."""
    stripped = value.strip()
    if name == "VLLM_NEURON_BACKEND":
        default = bool(rules.routes) and rules.route(stripped) == rules.default_route
        return None if default else value
    if name == "NEURON_CC_FLAGS":
        return normalise_cc_flags(value)
    if name == "NEURON_LOGICAL_NC_CONFIG":
        lnc = str(int(stripped)) if stripped.isascii() and stripped.isdigit() else value
        return None if target is not None and lnc == DEFAULT_LNC.get(target) else lnc
    if name in FLOATS:
        try:
            number = float(stripped)
        except ValueError:
            return value
        return None if number == FLOATS[name] else repr(number)
    if name in FLAGS:
        try:
            on = bool(int(stripped))
        except ValueError:
            return value
        return "1" if on else None
    return value
