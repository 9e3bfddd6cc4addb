"""The double's bucket resolution at engine start: the plugin's ValueErrors for rows D3-D8, D10.

Written from the plugin's code as read in jinhuang12/vllm-neuron ``vllm_neuron/utils/bucket_utils.py``
@10c6804db2035ce7de5a19474a00b78223d9ebb4 (``validate_num_batched_tokens_buckets``,
``validate_num_seqs_buckets``, ``resolve_segmented_prefill_config``,
``validate_kv_segment_size_buckets``, ``validate_decode_context_length_buckets``,
``align_prefill_buckets_for_dcp``, ``get_max_num_batched_tokens``), called in the order of the
bucket block of the model runner's ``__init__`` (vllm-project/vllm-neuron
``vllm_neuron/vllm/worker/neuron_model_runner.py`` @9fc042eaa7e50fbfda292b75c980bf56a9a0e8b6:
explicit kv segments first, "Auto-setting num_batched_tokens_buckets to match
kv_segment_size_buckets", then the APC check); the DCP alignment as the scheduler's ``__init__``
(``NeuronAsyncScheduler``, index copy without a path) calls ``resolve_num_batched_tokens_buckets``
with ``dcp_stride = dcp * block_size`` only when ``dcp > 1``. Messages are the plugin's where the source shows
them. ``max_num_batched_tokens`` arrives set: the API server defaults it when the command line
leaves it out (``platform.resolve_config``, row D23). Not modelled: D11 (needs the model's head
counts).
"""

from __future__ import annotations

import itertools
from typing import Any

SEGMENT_SIZES = {512, 1024, 2048, 4096, 8192}
"""``SUPPORTED_KV_SEGMENT_SIZES``: sizes the segmented attention NKI kernel supports."""

SINGLE_SHOT_MAX_MODEL_LEN = 16 * 1024
"""``MAX_MODEL_LEN_SINGLE_SHOT``: above it prefill must be segmented."""

CONTEXT_TILE = 128
"""``_DECODE_CONTEXT_LENGTH_PMAX``: decode context buckets are multiples of the kernel tile."""


def ascending(name: str, buckets: list[int]) -> None:
    """The bucket validators' shared order rule: strictly ascending, else ValueError."""
    if any(b <= a for a, b in itertools.pairwise(buckets)):
        raise ValueError(f"{name} must be in strictly ascending order, got {buckets}")


def check_list(name: str, buckets: Any, last_name: str, last: int) -> list[int]:
    """``validate_num_batched_tokens_buckets`` / ``validate_num_seqs_buckets`` (rows D3, D7):
    non-empty list of positive ints, strictly ascending, ending with ``last``; ValueError."""
    if not buckets:
        raise ValueError(f"{name} cannot be empty")
    if not isinstance(buckets, list):
        raise ValueError(f"{name} must be a list, got {type(buckets).__name__}")
    for i, bucket in enumerate(buckets):
        if not isinstance(bucket, int):
            raise ValueError(f"{name}[{i}] must be an integer, got {bucket}")
        if bucket <= 0:
            raise ValueError(f"{name}[{i}] must be positive, got {bucket}")
    ascending(name, buckets)
    if buckets[-1] != last:
        raise ValueError(
            f"Last bucket in {name} must equal {last_name} ({last}), got {buckets[-1]}"
        )
    return buckets


def segmented_default(mnbt: int, mml: int) -> list[int] | None:
    """``resolve_segmented_prefill_config`` (row D4): single-shot (None) when ``mnbt >= mml``
    and ``mml`` is at most 16384, else segments of ``[mnbt]`` for a supported size; ValueError."""
    sizes = sorted(SEGMENT_SIZES)
    if mnbt >= mml:
        if mml > SINGLE_SHOT_MAX_MODEL_LEN:
            raise ValueError(
                f"Single-shot prefill (max_num_batched_tokens={mnbt} >= max_model_len={mml}) is "
                f"only supported when max_model_len <= {SINGLE_SHOT_MAX_MODEL_LEN}. Set "
                f"max_num_batched_tokens to one of {sizes} to enable chunked prefill."
            )
        return None
    if mnbt not in SEGMENT_SIZES:
        raise ValueError(
            f"max_num_batched_tokens={mnbt} is not a supported chunked prefill size on Neuron. "
            f"Supported values: {sizes}."
        )
    return [mnbt]


def check_segments(kv: Any, nbt: list[int] | None) -> list[int]:
    """``validate_kv_segment_size_buckets`` (row D5): non-empty ascending ints, each a supported
    size, exactly one, and an explicit ``nbt`` equal to it; ValueError. No block-size rule (the
    plugin's code has none)."""
    name = "kv_segment_size_buckets"
    if not isinstance(kv, list) or not kv:
        raise ValueError(f"{name} must be a non-empty list")
    for i, size in enumerate(kv):
        if not isinstance(size, int):
            raise ValueError(f"{name}[{i}] must be an integer, got {size}")
    ascending(name, kv)
    for i, size in enumerate(kv):
        if size not in SEGMENT_SIZES:
            raise ValueError(f"{name}[{i}] = {size} is not a supported segment size.")
    if len(kv) != 1:
        raise ValueError(f"Only one segment size is currently supported, got {len(kv)}: {kv}.")
    if nbt is not None and nbt != kv:
        raise ValueError(
            f"When {name} is set, num_batched_tokens_buckets must match because the segmented "
            f"kernel currently requires the prefill bucket length to equal the segment size."
        )
    return kv


def check_contexts(buckets: Any, mml: int) -> list[int]:
    """``validate_decode_context_length_buckets`` (row D8): a non-empty ascending list of positive
    ints, each below ``mml`` and a multiple of 128; ValueError."""
    name = "decode_context_length_buckets"
    if not isinstance(buckets, list) or not buckets:
        raise ValueError(f"{name} must be a non-empty list")
    for i, bucket in enumerate(buckets):
        if isinstance(bucket, bool) or not isinstance(bucket, int) or bucket <= 0:
            raise ValueError(f"{name}[{i}] must be a positive integer, got {bucket!r}")
    ascending(name, buckets)
    for i, bucket in enumerate(buckets):
        if bucket >= mml:
            raise ValueError(
                f"{name}[{i}]={bucket} must be strictly less than max_model_len={mml}; "
                "max_model_len is the implicit fallback bucket."
            )
        if bucket % CONTEXT_TILE:
            raise ValueError(f"{name}[{i}]={bucket} must be divisible by {CONTEXT_TILE}.")
    return buckets


def align_for_dcp(buckets: list[int], stride: int) -> list[int]:
    """``align_prefill_buckets_for_dcp`` (row D10): keep buckets divisible by
    ``decode_context_parallel_size * block_size``; ValueError when none is or the largest is not."""
    if stride <= 1:
        return buckets
    kept = [b for b in buckets if b % stride == 0]
    if not kept:
        raise ValueError(f"No prefill buckets are divisible by the DCP shard stride ({stride}).")
    if kept[-1] != buckets[-1]:
        raise ValueError(
            f"The largest prefill bucket (max_num_batched_tokens = {buckets[-1]}) is not "
            f"divisible by the DCP shard stride ({stride})."
        )
    return kept


def pow2_then(start: int, top: int) -> list[int]:
    """``get_default_num_batched_tokens_buckets`` (start 128) / ``get_default_num_seqs_buckets``
    (start 1): powers of two below ``top``, then ``top``."""
    out, value = [], start
    while value < top:
        out.append(value)
        value *= 2
    return [*out, top]


def resolve_buckets(args: dict[str, Any]) -> dict[str, Any]:
    """The runner's bucket block at engine start, in its order: segmented default (when no
    explicit kv), prefill buckets, num_seqs, decode contexts, kv segments, then APC. Returns
    ``{"nbt", "kv", "seqs", "contexts"}`` (``kv`` None for single-shot prefill; ``contexts`` ends
    with ``max_model_len``). Raises ValueError where the plugin does (rows D3-D8, D10); APC is on
    unless ``enable_prefix_caching`` is false (vLLM's default)."""
    nc = (args.get("additional_config") or {}).get("neuron_config") or {}
    mml = int(args["max_model_len"])
    nbt, kv = nc.get("num_batched_tokens_buckets"), nc.get("kv_segment_size_buckets")
    # Set by the API server when the command line leaves it out (platform.resolve_config).
    mnbt = min(int(args["max_num_batched_tokens"]), mml)
    auto = None if "kv_segment_size_buckets" in nc else segmented_default(mnbt, mml)
    explicit = "num_batched_tokens_buckets" in nc
    if explicit:
        nbt = check_list("num_batched_tokens_buckets", nbt, "max_num_batched_tokens", mnbt)
    else:
        nbt = auto or pow2_then(128, mnbt)
    max_seqs = int(args["max_num_seqs"])
    seqs = pow2_then(1, max_seqs)
    if "num_seqs_buckets" in nc:
        seqs = check_list("num_seqs_buckets", nc["num_seqs_buckets"], "max_num_seqs", max_seqs)
    contexts = []
    if "decode_context_length_buckets" in nc:
        contexts = check_contexts(nc["decode_context_length_buckets"], mml)
    if "kv_segment_size_buckets" in nc:
        kv = check_segments(kv, nbt if explicit else None)
        nbt = nbt if explicit else list(kv)  # "Auto-setting num_batched_tokens_buckets to match"
    elif auto is not None:
        kv = check_segments(auto, nbt if explicit else None)
    if kv is None and args.get("enable_prefix_caching", True):
        raise ValueError(
            "Automatic Prefix Caching (APC) requires segmented prefill to be enabled. Either "
            "disable APC with '--no-enable-prefix-caching' or set 'max_num_batched_tokens' to a "
            f"supported segmented prefill size {sorted(SEGMENT_SIZES)} to auto-enable segmented "
            "prefill."
        )
    dcp = int(args.get("decode_context_parallel_size") or 1)
    if dcp > 1:  # the runner passes dcp_stride = dcp * block_size, 1 without DCP
        nbt = align_for_dcp(nbt, dcp * int(args.get("block_size") or 32))
    return {"nbt": nbt, "kv": kv, "seqs": seqs, "contexts": [*contexts, mml]}
