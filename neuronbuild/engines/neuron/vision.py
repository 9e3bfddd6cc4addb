"""vLLM-Neuron's vision encoder plan: whether a vision config exists, its buckets and its tp/dp.

Mirrors, rule for rule, ``NeuronPlatform.check_and_update_config`` and
``_resolve_vision_auto_config`` (``vllm_neuron/vllm/platform.py``, jinhuang12/vllm-neuron
@25cf3c8c, byte-identical in AWShtokoyo/vllm-neuron @01c89e38: fidelity rows D13-D15) and
``VisionNeuronConfig.resolve_tp_dp`` / ``__post_init__`` (``vllm_neuron/model/neuron_config.py``,
jinhuang12/vllm-neuron @289de16c: row D16). Pure functions over the recipe's engine arguments and
the model's :class:`~neuronbuild.engines.neuron.model.ModelFacts` (None where this host has no
config of the model: a hub model not in its Hugging Face cache).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuronbuild.engines.neuron.buckets import (
    check_bucket_list,
    positive_int,
    powers_of_two_then_max,
    sub_mapping,
)
from neuronbuild.engines.neuron.model import ModelFacts
from neuronbuild.errors import MISSING, RecipeError

DEFAULT_VISION_ATTENTION_BLOCK_SIZE = 2048
"""``VisionNeuronConfig.vision_attention_block_size`` default (vision tokens)."""


@dataclass(frozen=True)
class VisionPlan:
    """The resolved vision encoder: ``buckets`` (vision tokens per graph), ``block`` (the
    attention block, raised for ``max_pixels``), ``tp`` x ``dp`` = the world size."""

    buckets: list[int]
    block: int
    tp: int
    dp: int


def next_power_of_2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for ``n <= 1``): ``bucket_utils.next_power_of_2``."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def fetch(args: Mapping[str, Any]) -> str:
    """The command that puts the hub model's config.json of ``args`` in the local cache."""
    revision = args.get("revision")
    at = f" --revision {revision}" if isinstance(revision, str) else ""
    return f"hf download {args.get('model')} config.json{at}"


def has_vision(args: Mapping[str, Any], model: ModelFacts | None, namespace: str) -> bool:
    """Whether vLLM-Neuron runs with a vision config: any model whose ``config.json`` has a
    ``vision_config`` gets one created (D13, ``check_and_update_config``: ``if hasattr(
    model_config.hf_config, "vision_config")``). Where this host has no config of the model, the
    recipe states it with ``additional_config.<namespace>`` (``{}`` for all defaults; the release's
    :attr:`~.releases.Rules.encoder_namespace`) or an EPD role flag."""
    additional = args.get("additional_config") or {}
    stated = (
        namespace in additional
        or bool(args.get("mm_encoder_only"))
        or additional.get("mm_language_model_only") is True
    )
    return stated or (model is not None and model.vision)


def _block(
    args: Mapping[str, Any], block: int, model: ModelFacts | None, errors: list[RecipeError]
) -> int:
    """The attention block, raised to ``next_power_of_2(max_pixels // patch_size ** 2)`` when a
    ``mm_processor_kwargs.max_pixels`` image needs more tokens ("Block size increased to %d to
    fit max_pixels")."""
    kwargs = args.get("mm_processor_kwargs")
    max_pixels = kwargs.get("max_pixels") if isinstance(kwargs, Mapping) else None
    if not max_pixels:
        return block
    if model is None:
        errors.append(
            RecipeError(
                "mm_processor_kwargs.max_pixels",
                max_pixels,
                "vLLM-Neuron raises vision_attention_block_size from the model's "
                "vision_config.patch_size, which this host cannot read (a hub model whose "
                f"config.json is not in the local Hugging Face cache); fetch it ({fetch(args)}) "
                "or set model to a local folder",
            )
        )
        return block
    if model.patch_size is None or not isinstance(max_pixels, int):
        return block  # the model class has no max_pixels rule (get_max_pixels_token_count: None)
    tokens = max_pixels // model.patch_size**2
    return next_power_of_2(tokens) if tokens > block else block


def _buckets(
    where: str,
    args: Mapping[str, Any],
    vnc: Mapping[str, Any],
    block: int,
    model: ModelFacts | None,
    errors: list[RecipeError],
) -> list[int]:
    given = vnc.get("num_vision_tokens_buckets")
    cap = vnc.get("max_vision_seq_len")
    if given is not None:
        list_errors = check_bucket_list(f"{where}.num_vision_tokens_buckets", given)
        errors += list_errors
        if list_errors:
            return []
        if cap:
            # "Cannot set both num_vision_tokens_buckets and max_vision_seq_len".
            errors.append(
                RecipeError(
                    f"{where}.max_vision_seq_len",
                    cap,
                    "cannot be set with num_vision_tokens_buckets (it caps the default buckets); "
                    "drop one of them",
                )
            )
        elif max(given) < block:
            # "Largest bucket (...) is smaller than vision_attention_block_size (...)".
            errors.append(
                RecipeError(
                    f"{where}.num_vision_tokens_buckets",
                    given,
                    f"the largest bucket is below vision_attention_block_size ({block}); add a "
                    f"bucket of at least {block}",
                )
            )
        return list(given)
    if cap is not None:
        cap_errors = positive_int(f"{where}.max_vision_seq_len", cap)
        errors += cap_errors
        if cap_errors:
            return []
    cap = cap or block
    if cap < block:
        errors.append(
            RecipeError(
                f"{where}.max_vision_seq_len",
                cap,
                f"is below vision_attention_block_size ({block}); raise it to at least {block}",
            )
        )
        return []
    max_model_len = int(args["max_model_len"])
    if model is None:
        if next_power_of_2(max_model_len) < cap:
            # The top bucket is min(next_pow2(max_model_len x merge factor), cap) and the merge
            # factor (>= 1) is the model class's: only a local config.json says it.
            errors.append(
                RecipeError(
                    f"{where}.num_vision_tokens_buckets",
                    MISSING,
                    "the default vision buckets depend on the model's vision token merge factor, "
                    "which this host cannot read (a hub model whose config.json is not in the "
                    f"local Hugging Face cache); fetch it ({fetch(args)}) or list the buckets",
                )
            )
            return []
        return powers_of_two_then_max(block, cap)
    top = min(next_power_of_2(max_model_len * model.merge_factor), cap)
    return powers_of_two_then_max(block, top)


def _tp_dp(
    where: str, args: Mapping[str, Any], vnc: Mapping[str, Any], errors: list[RecipeError]
) -> tuple[int, int]:
    """``resolve_tp_dp(world_size)``: both 1 -> (1, world); one set -> the other is
    ``world // it`` (world must divide); both set -> their product must be the world."""
    world = int(args.get("tensor_parallel_size") or 1)
    tp, dp = vnc.get("tp_size", 1), vnc.get("dp_size", 1)
    found = positive_int(f"{where}.tp_size", tp) + positive_int(f"{where}.dp_size", dp)
    errors += found
    if found:
        return 1, world
    if tp == 1 and dp == 1:
        return 1, world
    if dp == 1 or tp == 1:
        name, size = ("tp_size", tp) if dp == 1 else ("dp_size", dp)
        if world % size:
            errors.append(
                RecipeError(
                    f"{where}.{name}",
                    size,
                    f"must divide tensor_parallel_size ({world}); vLLM-Neuron infers the other",
                )
            )
            return 1, world
        return (tp, world // tp) if dp == 1 else (world // dp, dp)
    if tp * dp != world:
        errors.append(
            RecipeError(
                f"{where}.tp_size",
                tp,
                f"tp_size * dp_size ({tp} * {dp}) must equal tensor_parallel_size ({world}); "
                "set one of them and let vLLM-Neuron infer the other",
            )
        )
    return tp, dp


def resolve_vision(
    args: Mapping[str, Any], model: ModelFacts | None, namespace: str
) -> tuple[VisionPlan | None, list[RecipeError]]:
    """The vision encoder vLLM-Neuron builds for these engine arguments, or None when it builds
    none (no vision config, or ``mm_language_model_only``), with every problem found.
    ``namespace``: the ``additional_config`` key the release reads the encoder settings from
    (:attr:`~.releases.Rules.encoder_namespace`: ``vision_neuron_config`` up to 0.24,
    ``encoder_neuron_config`` from 0.29, configuration reference v2.33.0, 2026-10-16), read with
    0.24's fields and rules: the v2.33.0 page's field table was not readable to us."""
    where = f"additional_config.{namespace}"
    additional = args.get("additional_config") or {}
    vnc, errors = sub_mapping(additional, namespace)
    if model is not None and not model.vision and namespace in additional:
        # The platform creates and resolves a vision config only for a model with a
        # vision_config; what the runner makes of one given for another model is not in sources.
        errors.append(
            RecipeError(
                where,
                additional[namespace],
                "the model's config.json has no vision_config, so it has no vision encoder to "
                f"compile; remove {namespace}",
            )
        )
        return None, errors
    language_only = additional.get("mm_language_model_only") is True
    if not has_vision(args, model, namespace) or (language_only and model is None):
        return None, errors
    block = vnc.get("vision_attention_block_size", DEFAULT_VISION_ATTENTION_BLOCK_SIZE)
    block_errors = positive_int(f"{where}.vision_attention_block_size", block)
    errors += block_errors
    if block_errors:
        return None, errors
    block = _block(args, block, model, errors)
    buckets = _buckets(where, args, vnc, block, model, errors)
    tp, dp = _tp_dp(where, args, vnc, errors)
    if language_only:
        # A language-only engine builds no vision graph, but the platform still resolves the
        # vision config of a local VL model (``_resolve_vision_auto_config``, called for any
        # ``hf_config.vision_config``) and the worker its tp/dp (``resolve_tp_dp`` in
        # ``init_device``), so their refusals stand (fidelity rows D15, D16, D20).
        return None, errors
    return (None if errors else VisionPlan(buckets, block, tp, dp)), errors
