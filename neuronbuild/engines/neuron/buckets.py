"""vLLM-Neuron's bucket defaults and validation rules, mirrored for recipes.

Pinned to ``reference/vllm-neuron-configuration.md`` (date_updated 2026-08-13) and the code it
describes: ``vllm_neuron/utils/bucket_utils.py`` (defaults), ``NeuronConfig.from_dict`` and
``resolve_segmented_prefill_config()`` (validation), ``neuron_worker.py``
``_prefill_compile_targets()`` / ``_decode_compile_targets()`` (how buckets combine into graphs).
Each rule's comment names the check it mirrors. All functions are pure: they take the recipe's
values and return resolved buckets plus a list of :class:`RecipeError`.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuronbuild.errors import MISSING, RecipeError

SUPPORTED_KV_SEGMENT_SIZES = (512, 1024, 2048, 4096, 8192)
"""``SUPPORTED_KV_SEGMENT_SIZES`` of the segmented attention kernel (tokens)."""

MAX_MODEL_LEN_SINGLE_SHOT = 16384
"""Largest ``max_model_len`` (tokens) for single-shot (non-segmented) prefill."""

DEFAULT_BLOCK_SIZE = 32
"""vLLM's ``block_size`` default on Neuron (tokens), per the configuration reference."""

DECODE_CONTEXT_MULTIPLE = 128
"""``decode_context_length_buckets`` entries must be multiples of this (tokens)."""

NC = "additional_config.neuron_config"


def powers_of_two_then_max(start: int, maximum: int) -> list[int]:
    """``start, 2*start, 4*start, ...`` below ``maximum``, then ``maximum`` itself.

    The shape of every vLLM-Neuron default bucket list (``get_default_num_batched_tokens_buckets``
    with start 128, ``get_default_num_seqs_buckets`` with start 1,
    ``get_default_num_vision_tokens_buckets`` with the vision attention block size).
    """
    out = []
    value = start
    while value < maximum:
        out.append(value)
        value *= 2
    out.append(maximum)
    return out


def check_bucket_list(field: str, value: Any) -> list[RecipeError]:
    """Mirror of vLLM-Neuron's list checks: "must be a list", "cannot be empty", "[i] must be an
    integer", "must be positive", "must be in strictly ascending order"."""
    if not isinstance(value, list):
        return [RecipeError(field, value, "must be a list of integers, e.g. [128, 256]")]
    if not value:
        return [
            RecipeError(field, value, "cannot be empty; list at least one bucket or drop the key")
        ]
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int):
            return [RecipeError(f"{field}[{i}]", item, "must be an integer")]
        if item <= 0:
            return [RecipeError(f"{field}[{i}]", item, "must be positive")]
    if any(a >= b for a, b in itertools.pairwise(value)):
        fixed = sorted(set(value))
        return [RecipeError(field, value, f"must be in strictly ascending order, e.g. {fixed}")]
    return []


@dataclass(frozen=True)
class NeuronBuckets:
    """The bucket lists vLLM-Neuron will compile for one recipe, after defaults.

    All values are token counts except ``num_seqs`` (sequences). ``kv_segment_size`` is ``None``
    for single-shot prefill. ``vision`` is ``None`` when no vision encoder is built; ``language`` is
    False for a vision-only (``mm_encoder_only``) engine.
    """

    max_num_batched_tokens: int
    num_batched_tokens: list[int]
    kv_segment_size: list[int] | None
    num_seqs: list[int]
    decode_context_length: list[int] | None
    vision: list[int] | None
    language: bool


def sub_mapping(
    additional: Mapping[str, Any], key: str
) -> tuple[dict[str, Any], list[RecipeError]]:
    """``additional_config[key]`` as a dict (``{}`` when absent), or an error if not a mapping."""
    value = additional.get(key)
    if value is None:
        return {}, []
    if not isinstance(value, Mapping):
        return {}, [RecipeError(f"additional_config.{key}", value, "must be a mapping")]
    return dict(value), []


def positive_int(field: str, value: Any) -> list[RecipeError]:
    """An error naming ``field`` unless ``value`` is a positive integer (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return [RecipeError(field, value, "must be a positive integer")]
    return []


def _check_segment_sizes(field: str, sizes: Any, block_size: int) -> list[RecipeError]:
    """``kv_segment_size_buckets`` checks: a bucket list, each size one the segmented attention
    kernel supports ("[i] = s is not a supported segment size. The segmented attention kernel only
    supports: {...}") and divisible by ``block_size``, and a single size ("Only one segment size is
    currently supported")."""
    errors = check_bucket_list(field, sizes)
    if errors:
        return errors
    for i, size in enumerate(sizes):
        if size not in SUPPORTED_KV_SEGMENT_SIZES:
            errors.append(
                RecipeError(
                    f"{field}[{i}]",
                    size,
                    "is not a supported segment size; use one of "
                    f"{list(SUPPORTED_KV_SEGMENT_SIZES)}",
                )
            )
        elif size % block_size:
            errors.append(
                RecipeError(
                    f"{field}[{i}]",
                    size,
                    f"must be divisible by block_size ({block_size}); change one of them",
                )
            )
    if len(sizes) > 1:
        errors.append(
            RecipeError(field, sizes, "only one segment size is supported; keep a single size")
        )
    return errors


def _last_bucket_error(buckets: list[int], mnbt: int, args: Mapping[str, Any]) -> RecipeError:
    """ "Last bucket in num_batched_tokens_buckets must equal max_num_batched_tokens (X)", where X
    is capped at max_model_len (``get_max_num_batched_tokens``)."""
    given = args.get("max_num_batched_tokens")
    if given is not None and given > mnbt:
        fix = (
            f"max_num_batched_tokens ({given}) is capped at max_model_len ({mnbt}); end the "
            f"list with {mnbt}"
        )
    else:
        fix = f"end the list with {mnbt} or set max_num_batched_tokens to {buckets[-1]}"
    return RecipeError(
        f"{NC}.num_batched_tokens_buckets",
        buckets,
        f"last bucket must equal max_num_batched_tokens ({mnbt}); {fix}",
    )


def _resolve_prefill(
    args: Mapping[str, Any], nc: Mapping[str, Any], errors: list[RecipeError]
) -> tuple[int, list[int], list[int] | None]:
    """``get_max_num_batched_tokens`` + ``resolve_segmented_prefill_config`` + nbt defaults."""
    max_model_len = int(args["max_model_len"])
    block_size = args.get("block_size") or DEFAULT_BLOCK_SIZE
    nbt_given = nc.get("num_batched_tokens_buckets", MISSING)
    kv_given = nc.get("kv_segment_size_buckets")
    nbt_errors = (
        check_bucket_list(f"{NC}.num_batched_tokens_buckets", nbt_given)
        if nbt_given is not MISSING
        else []
    )
    errors += nbt_errors
    nbt_ok = nbt_given is not MISSING and not nbt_errors
    kv_ok = True
    if kv_given is not None:
        kv_errors = _check_segment_sizes(f"{NC}.kv_segment_size_buckets", kv_given, block_size)
        errors += kv_errors
        kv_ok = not kv_errors

    mnbt = args.get("max_num_batched_tokens")
    kv_auto = kv_given is not None and kv_ok and nbt_given is MISSING
    if mnbt is None:
        if not nbt_ok and not kv_auto:
            # vLLM's own default differs by version and entry point (LLM vs. the API server), so a
            # recipe that leaves it to vLLM would plan graphs the server never asks for.
            errors.append(
                RecipeError(
                    "max_num_batched_tokens",
                    MISSING,
                    "is required unless additional_config.neuron_config.num_batched_tokens_buckets "
                    "is given (vLLM's default differs by version and entry point); set it",
                )
            )
            return 0, [], None
        mnbt = nbt_given[-1] if nbt_ok else kv_given[-1] if kv_given is not None else 0
    # get_max_num_batched_tokens(): the effective maximum is capped at max_model_len.
    mnbt = min(int(mnbt), max_model_len)

    if kv_given is not None:
        if not kv_ok:
            return mnbt, [], None
        if nbt_given is MISSING:
            # "Auto-setting num_batched_tokens_buckets to match kv_segment_size_buckets", and
            # max_num_batched_tokens is raised to the segment size when it is smaller (S3
            # neuron_model_runner.py @9fc042ea, bucket block of __init__).
            return max(mnbt, kv_given[-1]), list(kv_given), list(kv_given)
        nbt = list(nbt_given) if nbt_ok else []
        if nbt_ok and nbt[-1] != mnbt:
            errors.append(_last_bucket_error(nbt_given, mnbt, args))
        if nbt_ok and nbt != list(kv_given):
            # "When kv_segment_size_buckets is set, num_batched_tokens_buckets must match because
            # the segmented kernel currently requires the prefill bucket length to equal the
            # segment size"
            errors.append(
                RecipeError(
                    f"{NC}.num_batched_tokens_buckets",
                    nbt_given,
                    f"must equal kv_segment_size_buckets ({kv_given}) when segmented prefill is "
                    "set (kernel constraint); make the two lists identical or drop it",
                )
            )
        return mnbt, nbt, list(kv_given)

    if mnbt >= max_model_len:
        # Single-shot prefill: "Single-shot prefill (...) is only supported when max_model_len
        # <= 16384. Set max_num_batched_tokens to one of [...]"
        if max_model_len > MAX_MODEL_LEN_SINGLE_SHOT:
            errors.append(
                RecipeError(
                    "max_model_len",
                    max_model_len,
                    f"single-shot prefill (max_num_batched_tokens >= max_model_len) is only "
                    f"supported up to {MAX_MODEL_LEN_SINGLE_SHOT}; set max_num_batched_tokens to "
                    f"one of {list(SUPPORTED_KV_SEGMENT_SIZES)} for segmented prefill",
                )
            )
        nbt = list(nbt_given) if nbt_ok else powers_of_two_then_max(128, mnbt)
        if nbt_ok and nbt[-1] != mnbt:
            errors.append(_last_bucket_error(nbt_given, mnbt, args))
        return mnbt, nbt, None

    # mnbt < max_model_len: vLLM-Neuron auto-enables segmented prefill with
    # kv_segment_size_buckets = num_batched_tokens_buckets = [mnbt].
    if mnbt not in SUPPORTED_KV_SEGMENT_SIZES:
        # "max_num_batched_tokens=X is not a supported chunked prefill size on Neuron."
        errors.append(
            RecipeError(
                "max_num_batched_tokens",
                mnbt,
                f"is below max_model_len ({max_model_len}), so prefill is segmented, and must be a "
                f"supported segment size: one of {list(SUPPORTED_KV_SEGMENT_SIZES)}",
            )
        )
    elif mnbt % block_size:
        errors.append(
            RecipeError(
                "max_num_batched_tokens",
                mnbt,
                f"is the segment size of segmented prefill and must be divisible by block_size "
                f"({block_size}); change one of them",
            )
        )
    if nbt_ok and list(nbt_given) != [mnbt]:
        errors.append(
            RecipeError(
                f"{NC}.num_batched_tokens_buckets",
                nbt_given,
                f"segmented prefill (max_num_batched_tokens {mnbt} < max_model_len "
                f"{max_model_len}) compiles exactly [{mnbt}]; set the list to [{mnbt}] or drop it",
            )
        )
    return mnbt, [mnbt], [mnbt]


def _check_prefix_caching(
    args: Mapping[str, Any], kv: list[int] | None, errors: list[RecipeError]
) -> None:
    """Automatic prefix caching needs segmented prefill: ``if kv_segment_size_buckets is None and
    enable_prefix_caching: raise ValueError("Automatic Prefix Caching (APC) requires segmented
    prefill to be enabled...")`` (S3 ``neuron_model_runner.py`` @9fc042ea, end of the bucket
    block). APC is on by default (``reference-configuration.md`` line 63, aws-neuron-sdk
    @81ce03ae), and ``model-recipes/qwen3-embedding-8b.md`` lines 88-90: "Enabling it with
    single-shot prefill fails at startup"."""
    if args.get("max_model_len") is None or errors:
        return
    if kv is None and args.get("enable_prefix_caching") is not False:
        sizes = [s for s in SUPPORTED_KV_SEGMENT_SIZES if s < int(args["max_model_len"])]
        errors.append(
            RecipeError(
                "enable_prefix_caching",
                args.get("enable_prefix_caching", MISSING),
                "automatic prefix caching (on by default) requires segmented prefill, and this "
                "recipe's prefill is single-shot; set enable_prefix_caching: false, or set "
                f"max_num_batched_tokens below max_model_len (one of {sizes})",
            )
        )


def _align_for_dcp(args: Mapping[str, Any], nbt: list[int], errors: list[RecipeError]) -> list[int]:
    """Decode context parallelism: prefill buckets not divisible by the DCP shard stride
    ``decode_context_parallel_size * block_size`` are dropped; "No prefill buckets are divisible by
    the DCP shard stride" and "The largest prefill bucket (max_num_batched_tokens = ...) is not
    divisible..." are errors (S4 ``utils/bucket_utils.py`` ``align_prefill_buckets_for_dcp``,
    AWShtokoyo/vllm-neuron @01c89e38; S3 runner passes ``dcp_stride``)."""
    dcp = args.get("decode_context_parallel_size", 1)
    if isinstance(dcp, bool) or not isinstance(dcp, int) or dcp <= 1:
        return nbt
    stride = dcp * int(args.get("block_size") or DEFAULT_BLOCK_SIZE)
    kept = [b for b in nbt if b % stride == 0]
    if not kept:
        errors.append(
            RecipeError(
                "decode_context_parallel_size",
                dcp,
                f"no prefill bucket of {nbt} is divisible by the DCP shard stride "
                f"decode_context_parallel_size * block_size = {stride}; use buckets that are "
                "multiples of it or a smaller decode_context_parallel_size",
            )
        )
        return []
    if kept[-1] != nbt[-1]:
        errors.append(
            RecipeError(
                "decode_context_parallel_size",
                dcp,
                f"the largest prefill bucket (max_num_batched_tokens = {nbt[-1]}) is not "
                f"divisible by the DCP shard stride {stride}; make max_num_batched_tokens a "
                "multiple of it",
            )
        )
    return kept


def _resolve_decode(
    args: Mapping[str, Any], nc: Mapping[str, Any], errors: list[RecipeError]
) -> tuple[list[int], list[int] | None]:
    max_num_seqs = int(args["max_num_seqs"])
    max_model_len = int(args["max_model_len"])
    seqs = nc.get("num_seqs_buckets", MISSING)
    if seqs is MISSING:
        num_seqs = powers_of_two_then_max(1, max_num_seqs)
    else:
        list_errors = check_bucket_list(f"{NC}.num_seqs_buckets", seqs)
        errors += list_errors
        num_seqs = list(seqs) if not list_errors else []
        if num_seqs and num_seqs[-1] != max_num_seqs:
            # "Last bucket in num_seqs_buckets must equal max_num_seqs (X)"
            errors.append(
                RecipeError(
                    f"{NC}.num_seqs_buckets",
                    seqs,
                    f"last bucket must equal max_num_seqs ({max_num_seqs}); end the list with "
                    f"{max_num_seqs} or set max_num_seqs to {num_seqs[-1]}",
                )
            )
    ctx = nc.get("decode_context_length_buckets")
    if ctx is None:
        return num_seqs, None
    ctx_errors = check_bucket_list(f"{NC}.decode_context_length_buckets", ctx)
    errors += ctx_errors
    if ctx_errors:
        return num_seqs, None
    for i, length in enumerate(ctx):
        if length >= max_model_len:
            # "must be strictly less than max_model_len=..; max_model_len is the implicit
            # fallback bucket"
            errors.append(
                RecipeError(
                    f"{NC}.decode_context_length_buckets[{i}]",
                    length,
                    f"must be below max_model_len ({max_model_len}), which is always compiled as "
                    "the fallback bucket; remove it",
                )
            )
        elif length % DECODE_CONTEXT_MULTIPLE:
            errors.append(
                RecipeError(
                    f"{NC}.decode_context_length_buckets[{i}]",
                    length,
                    f"must be divisible by {DECODE_CONTEXT_MULTIPLE}; use "
                    f"{(length // DECODE_CONTEXT_MULTIPLE + 1) * DECODE_CONTEXT_MULTIPLE}",
                )
            )
    return num_seqs, list(ctx)


def resolve_buckets(args: Mapping[str, Any]) -> tuple[NeuronBuckets | None, list[RecipeError]]:
    """Resolve every bucket list of a Neuron recipe's engine arguments, applying vLLM-Neuron's
    defaults and checks.

    ``args`` are the recipe's vLLM engine arguments (``additional_config`` already a mapping) with
    ``max_model_len`` and ``max_num_seqs`` present and positive. Returns the buckets, or ``None``
    with the list of every problem found.
    """
    errors: list[RecipeError] = []
    additional = args.get("additional_config") or {}
    nc, nc_errors = sub_mapping(additional, "neuron_config")
    errors += nc_errors

    encoder_only = bool(args.get("mm_encoder_only", False))
    language_only = additional.get("mm_language_model_only", False)
    if not isinstance(language_only, bool):
        errors.append(
            RecipeError(
                "additional_config.mm_language_model_only", language_only, "must be true or false"
            )
        )
    elif encoder_only and language_only:
        # Setting both raises ValueError at startup: a pool is either vision-only or language-only.
        errors.append(
            RecipeError(
                "additional_config.mm_language_model_only",
                language_only,
                "cannot be combined with mm_encoder_only (an engine is vision-only or "
                "language-only); drop one of them",
            )
        )

    mnbt, nbt, kv = _resolve_prefill(args, nc, errors)
    if nbt:
        nbt = _align_for_dcp(args, nbt, errors)
    _check_prefix_caching(args, kv, errors)
    num_seqs, ctx = _resolve_decode(args, nc, errors)
    if errors:
        return None, errors
    return (
        NeuronBuckets(
            max_num_batched_tokens=mnbt,
            num_batched_tokens=nbt,
            kv_segment_size=kv,
            num_seqs=num_seqs,
            decode_context_length=ctx,
            vision=None,  # resolved by vision.resolve_vision
            language=not encoder_only,
        ),
        [],
    )
