"""vLLM-Neuron's start-up checks of decode context parallelism (fidelity row D11).

``NeuronPlatform._validate_dcp_config`` (``vllm_neuron/vllm/platform.py``, jinhuang12/vllm-neuron
@25cf3c8c, read 2026-12-06) refuses, when ``decode_context_parallel_size`` (dcp) is above 1:

- a ``long_prefill_token_threshold`` above 0 that is not a multiple of ``dcp * block_size``;
- a ``kv_transfer_config`` whose ``kv_connector`` is not ``NeuronNixlConnector``;
- ``tensor_parallel_size < dcp * num_kv_heads`` (each KV head replicated across a DCP group);
- ``(num_attention_heads // num_kv_heads) % dcp != 0`` (the GQA group splits over the ranks);
- ``tensor_parallel_size % dcp != 0``.

The two head checks need the model's config (:class:`~.model.ModelFacts`); without it on this
host, or where ``hf_overrides`` / ``hf_config_path`` change what vLLM reads, they are left to the
compile host's start, as vLLM-Neuron makes them. The platform raises the first it meets; here a
field gets one line, the first of the order above.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuronbuild.engines.neuron.buckets import DEFAULT_BLOCK_SIZE
from neuronbuild.engines.neuron.model import ModelFacts
from neuronbuild.errors import RecipeError

NIXL = "NeuronNixlConnector"
"""The only KV connector DCP runs with."""


def _int(args: Mapping[str, Any], name: str, default: int) -> int | None:
    value = args.get(name, default)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def dcp_errors(args: Mapping[str, Any], model: ModelFacts | None) -> list[RecipeError]:
    """The errors vLLM-Neuron's DCP validation would raise at start for the engine arguments
    ``args`` and the model's head counts (``model``; None: not readable here). Mistyped values
    are left to their own checks."""
    dcp, tp = _int(args, "decode_context_parallel_size", 1), _int(args, "tensor_parallel_size", 1)
    block = _int(args, "block_size", DEFAULT_BLOCK_SIZE) or DEFAULT_BLOCK_SIZE
    if dcp is None or dcp <= 1 or tp is None:
        return []
    errors = []
    stride = dcp * block
    threshold = _int(args, "long_prefill_token_threshold", 0)
    if threshold is not None and threshold > 0 and threshold % stride:
        errors.append(
            RecipeError(
                "long_prefill_token_threshold",
                threshold,
                f"decode context parallelism needs a multiple of decode_context_parallel_size * "
                f"block_size ({dcp} * {block} = {stride}); set it to one, or to 0",
            )
        )
    kv = args.get("kv_transfer_config")
    connector = kv.get("kv_connector") if isinstance(kv, Mapping) else None
    if isinstance(kv, Mapping) and connector != NIXL:
        errors.append(
            RecipeError(
                "kv_transfer_config.kv_connector",
                connector,
                f"decode context parallelism runs only with {NIXL}; set kv_connector: {NIXL}",
            )
        )
    overridden = args.get("hf_overrides") or args.get("hf_config_path")
    if model is None or overridden:
        q, kv_heads = None, None
    else:
        q, kv_heads = model.q_heads, model.kv_heads
    if kv_heads is not None and tp < dcp * kv_heads:
        errors.append(
            RecipeError(
                "tensor_parallel_size",
                tp,
                f"decode context parallelism needs tensor_parallel_size >= "
                f"decode_context_parallel_size * the model's KV heads ({dcp} * {kv_heads} = "
                f"{dcp * kv_heads}); raise it or lower decode_context_parallel_size",
            )
        )
    if q is not None and kv_heads is not None and (q // kv_heads) % dcp:
        errors.append(
            RecipeError(
                "decode_context_parallel_size",
                dcp,
                f"must divide the model's query heads per KV head ({q} // {kv_heads} = "
                f"{q // kv_heads}); choose a divisor of it",
            )
        )
    if tp % dcp and not any(e.field == "decode_context_parallel_size" for e in errors):
        errors.append(
            RecipeError(
                "decode_context_parallel_size",
                dcp,
                f"must divide tensor_parallel_size ({tp}) so the DCP groups cover every rank; "
                f"set it to a divisor of {tp}",
            )
        )
    return errors
