"""A test double of vLLM + vLLM-Neuron (Neuron SDK 2.32.0) for the neuron engine's tests.

How it is reached, and why: the real compile path is ``python -m
neuronbuild.engines.neuron.compile_worker`` running ``vllm.entrypoints.openai.api_server`` with the
recipe's command line (``vllm.LLM`` stays for the offline API), after which vLLM loads vLLM-Neuron
through its ``vllm.platform_plugins`` entry point; serve runs
``python -m vllm.entrypoints.openai.api_server``; ``compile`` reads the installed versions with
``importlib.metadata``. The Neuron SDK cannot be installed here (its PyPI names are placeholders)
and vLLM's CPU build is not the vLLM 0.24.0 the SDK pairs with, so ``site/`` is a test-only
installation of the whole set, put first on ``PYTHONPATH`` (and ``sys.path`` in the test process):
``vllm`` 0.24.0 (only what the product calls: ``LLM``, the API server module, and vLLM's platform
plugin loading by entry point), ``vllm-neuron`` 0.24.0.1.1.0 registered through the same
``vllm.platform_plugins`` entry point as the real plugin, and ``*.dist-info`` of neuronx-cc, nki
and libtorch-neuronx-lite at the versions SDK 2.32.0's wheels report, PEP 440 local labels
included (``2.27.5334.0+f702b353``, ``0.6.0+31049202112.g85070674``, ``2.11.0.1.0.1284+f49d8626``:
fidelity row B12), each with a ``RECORD`` as pip writes one (hashed files, an unhashed ``.pyc``, a
``../../../bin`` script, the dist-info's own files). The seam is Python's import system and
distribution metadata, which the real path passes through unchanged: no switch in the product
knows about the double.

The double follows reference/vllm-neuron-contract.md: it plans the graphs of the engine arguments
itself (its own code, not neuronbuild's, from the plugin's rules: each function names the one it
follows), resolves the configuration as ``NeuronPlatform.check_and_update_config`` does (the O-level
from ``sys.argv``, row B10; a vision config with default buckets for any model whose ``config.json``
has a ``vision_config``, rows D13-D15, read from the model folder or the Hugging Face cache),
honours the phase skip switches with the worker's coupling (vision only with prefill or for an
``mm_encoder_only`` engine, none for a KV consumer, row A9), KV roles and pooling (``runner``,
``convert`` or the architecture's suffix),
writes one entry per graph in the real layout (``graph.hlo``, ``graph_<key>.neff``,
``.artifact_metadata_v0.json``, ``.compilation_complete`` last, plus a lock file, a temporary file
and a rank capture folder that must not be harvested) under a key derived from the graph's shapes
and what enters vLLM-Neuron's real key (compiler arguments, versions, target, KV block count and
its inputs, tensor parallelism, keyed variables; never the bucket lists), skips complete entries
(a hit), and at serve fails on a local miss like ``VLLM_NEURON_DISABLE_WARMUP_COMPILE``.

The second generation (vllm-neuron 0.29, Neuron 2.33.x; its GA in Neuron 2.34.0) comes from the
2.33/2.34 documentation pages, since its code is not public: the encoder namespace
``encoder_neuron_config``, ``VLLM_NEURON_BACKEND``'s routes, the Precompile Cache (device starts
with an explicit native value only), LoRA slot inputs from the GA. The double picks its generation
from its own installed vllm-neuron version; :func:`install` lays out the installation of one SDK
release (:data:`INSTALLS`) for a test.

Test-only variables: ``NEURON_DOUBLE_TRACES`` (a file; one line per graph a device start traced or
took from the Precompile Cache), ``NEURON_DOUBLE_RECORD`` (a file; one line per graph compiled),
``NEURON_DOUBLE_HELPERS`` (a file; the pid of the engine helper process each run leaves behind),
``NEURON_DOUBLE_GRAPH_SECONDS`` (seconds one graph's "compile" takes, for bench/),
``NEURON_DOUBLE_DEVICE`` (the Neuron target this "node" has, for serve), ``NEURON_DOUBLE_FAIL``
(fail like neuronx-cc: ``exit70-once:<state file>``, ``ncc:<prefill tokens>``,
``oom-above:<workers>``, ``oom-trace-above:<trace workers>``, ``hang``),
``NEURON_DOUBLE_NKI_INTERMEDIATE_CACHE`` (where NKI kernel binaries go, ``/var/tmp/...`` on a real
host; unset: the graphs call no NKI kernel).
"""

import hashlib
import shutil
from pathlib import Path

SITE = Path(__file__).resolve().parent / "site"
"""The folder to put first on ``PYTHONPATH`` and ``sys.path`` (the Neuron SDK 2.32.0 installation)."""

INSTALLS: dict[str, dict[str, str]] = {
    # aws-neuron-sdk @81ce03ae src/helperscripts/n2-manifest.json lines 134-163.
    "2.31.1": {
        "vllm": "0.21.0",
        "vllm-neuron": "0.21.0.1.0.0",
        "neuronx-cc": "2.26.6360.0",
        "nki": "0.5.0",
        "libtorch-neuronx-lite": "2.11.0.1.0.696",
        "torch-neuronx": "2.9.0.2.15.32035",
    },
    # Component release notes index of v2.33.0; its libtorch-neuronx-lite build is on no page we
    # could read: the one below is a stand-in older than 2.33.1's rebuild.
    "2.33.0": {
        "vllm": "0.29.0",
        "vllm-neuron": "0.29.0.1.2.0",
        "neuronx-cc": "2.28.7631.0",
        "nki": "0.7.0",
        "libtorch-neuronx-lite": "2.12.0.1.0.3000",
    },
    # Component release notes index of v2.33.0 (vLLM Neuron 0.29.0.1.2.0, Neuron Compiler
    # 2.28.7631.0, NKI 0.7.0) and release notes 2.33.1 (2026-11-11: libtorch_neuronx_lite
    # 2.12.0.1.0.4089); vLLM's version is the first three fields of vllm-neuron's.
    "2.33.1": {
        "vllm": "0.29.0",
        "vllm-neuron": "0.29.0.1.2.0",
        "neuronx-cc": "2.28.7631.0",
        "nki": "0.7.0",
        "libtorch-neuronx-lite": "2.12.0.1.0.4089",
    },
    # GitHub release v2.34.0 (2026-11-30): NKI 0.8.0. Its other versions are on no page we could
    # read: the vllm-neuron, neuronx-cc and libtorch-neuronx-lite below are stand-ins, newer than
    # 2.33's, not the real ones.
    "2.34.0": {
        "vllm": "0.29.0",
        "vllm-neuron": "0.29.0.2.0.0",
        "neuronx-cc": "2.29.0.0",
        "nki": "0.8.0",
        "libtorch-neuronx-lite": "2.13.0.1.0.5000",
    },
}
"""The versions each other SDK release installs, as the double reports them (``SITE`` is 2.32.0)."""


def install(release: str, into: Path) -> Path:
    """Neuron SDK ``release``'s installation of the double under ``into`` (``SITE``'s code with
    ``*.dist-info`` of :data:`INSTALLS`, each with ``METADATA`` and a ``RECORD``); returns the
    folder to put first on ``PYTHONPATH``."""
    site = into / f"site-{release}"
    shutil.copytree(SITE, site, ignore=shutil.ignore_patterns("*.dist-info", "__pycache__"))
    for dist, version in INSTALLS[release].items():
        name = dist.replace("-", "_")
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
            "Summary: neuronbuild test double (tests/neuron_double), not the real distribution\n"
        )
        digest = hashlib.sha256(f"{dist} {version}".encode()).hexdigest()
        (info / "RECORD").write_text(
            f"{name}/__init__.py,sha256={digest},100\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
        )
        if dist == "vllm-neuron":
            (info / "entry_points.txt").write_text(
                "[vllm.platform_plugins]\nneuron = vllm_neuron:register\n"
            )
    return site
