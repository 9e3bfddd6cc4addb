"""The ``neuron`` engine's planning half: vLLM-Neuron's rules, its graphs, one unit per graph.

Each graph is its own compile unit, so shards and machines compile disjoint graphs and adding one
bucket never invalidates the others: the bucket lists leave the key, the unit's own graph enters it.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from neuronbuild import envs
from neuronbuild.engines.arg_classes import normalise
from neuronbuild.engines.base import Engine, UnitSpec
from neuronbuild.engines.env_classes import EnvClass
from neuronbuild.engines.neuron_buckets import DEFAULT_BLOCK_SIZE, NeuronBuckets, resolve_buckets
from neuronbuild.engines.neuron_env import NEURON_ENV
from neuronbuild.engines.neuron_node import target_differences
from neuronbuild.errors import RecipeError, UserError, did_you_mean
from neuronbuild.graph import Graph

if TYPE_CHECKING:
    from neuronbuild.engines.compiler import UnitCompiler
    from neuronbuild.recipe import Recipe

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

VISION_NEURON_CONFIG_KEYS = (
    "num_vision_tokens_buckets",
    "vision_attention_block_size",
    "max_vision_seq_len",
    "tp_size",
    "dp_size",
    "encoder_cache_num_blocks",
    "encoder_cache_min_hold_time_ms",
)
"""``vision_neuron_config`` fields of the configuration reference (2026-08-13)."""

ADDITIONAL_CONFIG_KEYS = (
    "neuron_config",
    "vision_neuron_config",
    "mm_language_model_only",
    "override_neuron_config",
)
"""Top-level ``additional_config`` keys vLLM-Neuron reads (``override_neuron_config``: v0.2)."""

BUCKET_LIST_KEYS = {
    "neuron_config": (
        "num_batched_tokens_buckets",
        "num_seqs_buckets",
        "kv_segment_size_buckets",
        "decode_context_length_buckets",
    ),
    "vision_neuron_config": ("num_vision_tokens_buckets", "max_vision_seq_len"),
}
"""Keys that only choose which graphs exist; a unit's key has its own graph instead."""


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


class NeuronEngine(Engine):
    """vLLM + vllm-neuron: its rules, graphs, unit keys and serve environment. Its compile half
    (vLLM-Neuron in CPU compile mode) is not part of this version: :meth:`compiler` says so."""

    name: ClassVar[str] = "neuron"
    env_classes: ClassVar[Mapping[str, EnvClass]] = NEURON_ENV
    own_arg_defaults: ClassVar[Mapping[str, Any]] = {"block_size": DEFAULT_BLOCK_SIZE}
    required_toolchain: ClassVar[tuple[str, ...]] = ("vllm-neuron", "neuronx-cc", "torch-neuronx")
    note: ClassVar[str] = "one NEFF per graph; each graph is its own compile unit"
    # A large model's bucket NEFF takes minutes of neuronx-cc and several GiB of host memory
    # (users report OOM kills from too many concurrent neuronx-cc processes); rough defaults that
    # measured durations of earlier builds replace when balancing shards.
    graph_seconds: ClassVar[float] = 300.0
    unit_cpus: ClassVar[float] = 4.0
    unit_memory_gib: ClassVar[float] = 16.0

    def validate(self, recipe: Recipe) -> tuple[list[RecipeError], list[str]]:
        errors, warnings = super().validate(recipe)
        if recipe.cpu_isa is not None:
            errors.append(
                RecipeError("cpu_isa", recipe.cpu_isa, "only applies to target cpu; remove it")
            )
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
        additional = recipe.additional_config
        found = check_unknown_keys("additional_config", additional, ADDITIONAL_CONFIG_KEYS)
        errors += found[0]
        warnings += found[1]
        for sub, known in (
            ("neuron_config", NEURON_CONFIG_KEYS),
            ("vision_neuron_config", VISION_NEURON_CONFIG_KEYS),
        ):
            if isinstance(additional.get(sub), Mapping):
                found = check_unknown_keys(f"additional_config.{sub}", additional[sub], known)
                errors += found[0]
                warnings += found[1]
        errors += self._check_vision_parallelism(recipe)
        _, bucket_errors = resolve_buckets(recipe.engine_args)
        return errors + bucket_errors, warnings

    @staticmethod
    def _check_vision_parallelism(recipe: Recipe) -> list[RecipeError]:
        # "if both are set, tp_size * dp_size must equal world_size" (vision_neuron_config).
        vnc = recipe.additional_config.get("vision_neuron_config")
        if not isinstance(vnc, Mapping) or "tp_size" not in vnc or "dp_size" not in vnc:
            return []
        world = recipe.engine_args.get("tensor_parallel_size", 1)
        tp, dp = vnc["tp_size"], vnc["dp_size"]
        if isinstance(tp, int) and isinstance(dp, int) and tp * dp != world:
            return [
                RecipeError(
                    "additional_config.vision_neuron_config.tp_size",
                    tp,
                    f"tp_size * dp_size ({tp} * {dp}) must equal tensor_parallel_size ({world}); "
                    "set one of them and let vLLM-Neuron infer the other",
                )
            ]
        return []

    def buckets(self, recipe: Recipe) -> NeuronBuckets:
        """The resolved buckets of a valid recipe (ValueError if it is not valid)."""
        buckets, errors = resolve_buckets(recipe.engine_args)
        if buckets is None:
            raise ValueError("; ".join(map(str, errors)))
        return buckets

    def graphs(self, recipe: Recipe) -> list[Graph]:
        """Every graph vLLM-Neuron compiles for ``recipe``: prefill ``num_batched_tokens x
        (kv_segment_size or [0])``, decode ``num_seqs x (context buckets + [max_model_len])``,
        then one vision graph per vision bucket (``neuron_worker`` ``_*_compile_targets``)."""
        b = self.buckets(recipe)
        graphs = []
        if b.language:
            for tokens in b.num_batched_tokens:
                for segment in b.kv_segment_size or [0]:
                    graphs.append(Graph.prefill(tokens, segment))
            contexts = [*(b.decode_context_length or []), recipe.max_model_len]
            for batch in b.num_seqs:
                for context in contexts:
                    graphs.append(Graph.decode(batch, context))
        for tokens in b.vision or []:
            graphs.append(Graph.vision(tokens))
        return graphs

    def units(self, recipe: Recipe) -> list[UnitSpec]:
        return [UnitSpec((g,), {"graph": g.to_json()}) for g in self.graphs(recipe)]

    def node_differences(self, factors: dict[str, Any]) -> list[tuple[str, str, str]]:
        return target_differences(str(factors.get("target")))

    def serve_env(self, cache_root: str) -> dict[str, str]:
        # A local cache miss is fatal instead of an hour of compiling; no graph capture at start.
        return {
            envs.VLLM_CACHE_ROOT: cache_root,
            envs.VLLM_NEURON_DISABLE_WARMUP_COMPILE: "1",
            envs.NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND: "1",
        }

    def compiler(self) -> UnitCompiler:
        if importlib.util.find_spec("vllm_neuron") is None:
            raise UserError(
                "the neuron engine compiles with vllm-neuron and neuronx-cc, which are not "
                "importable here; "
                "install the Neuron SDK on this compile host (CPU-only hosts are fine)"
            )
        raise UserError("compiling Neuron units is not available in this neuronbuild version yet")

    def key_engine_args(self, recipe: Recipe) -> dict[str, Any]:
        args = super().key_engine_args(recipe)
        # Absent, vLLM-Neuron derives it from the largest bucket: both spellings key alike.
        args.setdefault("max_num_batched_tokens", self.buckets(recipe).max_num_batched_tokens)
        additional = dict(args.get("additional_config") or {})
        for sub, keys in BUCKET_LIST_KEYS.items():
            if isinstance(additional.get(sub), Mapping):
                additional[sub] = {k: v for k, v in additional[sub].items() if k not in keys}
        if "additional_config" in args:
            args["additional_config"] = additional
        resolved: dict[str, Any] = normalise(args)  # a bucket-less sub-config equals an absent one
        return resolved
