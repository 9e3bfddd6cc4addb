"""Fidelity row D11 (issue 42 item 3): vLLM-Neuron's decode context parallelism checks
(``NeuronPlatform._validate_dcp_config``, jinhuang12/vllm-neuron @25cf3c8c ``platform.py``) are
validate's, with the model's head counts read from its config where this host has it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import RecipeInvalid
from neuronbuild.recipe import parse_recipe
from tests.lib.builders import model_folder, neuron_recipe

LLAMA_70B = {
    "architectures": ["LlamaForCausalLM"],
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
}
"""Llama-3.3-70B's heads: 8 query heads per KV head."""


def dcp_recipe(tmp_path: Path, config: dict[str, Any] | None, **args: Any) -> dict[str, Any]:
    """A trn2 recipe with DCP 2 over TP 32, its buckets multiples of the DCP stride (2 x 32)."""
    model = "org/hub-model" if config is None else str(model_folder(tmp_path, json.dumps(config)))
    base = {"tensor_parallel_size": 32, "decode_context_parallel_size": 2, "model": model}
    return neuron_recipe(**{**base, **args})


def errors(data: dict[str, Any]) -> dict[str, str]:
    """Each refused field's hint; a field refused twice fails (one line per field)."""
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(data)
    found = [(e.field, e.hint) for e in caught.value.errors]
    assert len({f for f, _ in found}) == len(found), found
    return dict(found)


def test_a_valid_dcp_recipe_passes(tmp_path: Path) -> None:
    parse_recipe(dcp_recipe(tmp_path, LLAMA_70B))


def test_tp_below_dcp_times_the_kv_heads_is_refused(tmp_path: Path) -> None:
    found = errors(dcp_recipe(tmp_path, LLAMA_70B, tensor_parallel_size=8))
    assert "2 * 8 = 16" in found["tensor_parallel_size"]


def test_dcp_must_divide_the_query_heads_per_kv_head(tmp_path: Path) -> None:
    config = {**LLAMA_70B, "num_attention_heads": 24}  # 3 query heads per KV head
    found = errors(dcp_recipe(tmp_path, config))
    assert "24 // 8 = 3" in found["decode_context_parallel_size"]


def test_dcp_must_divide_tp_with_or_without_the_config(tmp_path: Path) -> None:
    # 3072 is a multiple of the DCP stride (3 x 32), so the bucket rules say nothing.
    lengths = {"max_model_len": 3072, "max_num_batched_tokens": 3072}
    six_per_kv_head = {**LLAMA_70B, "num_attention_heads": 48}  # divisible by dcp 3
    for config in (six_per_kv_head, None):
        found = errors(dcp_recipe(tmp_path, config, decode_context_parallel_size=3, **lengths))
        assert "must divide tensor_parallel_size (32)" in found["decode_context_parallel_size"]


def test_the_head_checks_wait_for_the_config(tmp_path: Path) -> None:
    # A hub model not in this host's cache: the compile host's start makes them.
    parse_recipe(dcp_recipe(tmp_path, None, tensor_parallel_size=8))


def test_a_long_prefill_threshold_off_the_stride_is_refused(tmp_path: Path) -> None:
    found = errors(dcp_recipe(tmp_path, LLAMA_70B, long_prefill_token_threshold=100))
    assert "2 * 32 = 64" in found["long_prefill_token_threshold"]
    parse_recipe(dcp_recipe(tmp_path, LLAMA_70B, long_prefill_token_threshold=128))


def test_a_kv_connector_other_than_nixl_is_refused(tmp_path: Path) -> None:
    kv = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    found = errors(dcp_recipe(tmp_path, LLAMA_70B, kv_transfer_config=kv))
    assert "NeuronNixlConnector" in found["kv_transfer_config.kv_connector"]


def test_without_dcp_nothing_is_checked(tmp_path: Path) -> None:
    kv = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    off = {"decode_context_parallel_size": 1, "tensor_parallel_size": 4}
    parse_recipe(dcp_recipe(tmp_path, LLAMA_70B, long_prefill_token_threshold=100, **off))
    parse_recipe(dcp_recipe(tmp_path, LLAMA_70B, kv_transfer_config=kv, **off))


def test_the_dcp_line_comes_before_the_bucket_stride_line_of_the_same_field(
    tmp_path: Path,
) -> None:
    # tp 32 with dcp 3: the platform refuses the split before the runner sees the buckets
    # (4096 is off the stride 3 x 32 too); one line for the field, the platform's.
    found = errors(dcp_recipe(tmp_path, None, decode_context_parallel_size=3))
    assert "must divide tensor_parallel_size (32)" in found["decode_context_parallel_size"]


def test_hf_overrides_leave_the_head_checks_to_the_compile_host(tmp_path: Path) -> None:
    overrides = {"num_key_value_heads": 4}
    parse_recipe(dcp_recipe(tmp_path, LLAMA_70B, tensor_parallel_size=8, hf_overrides=overrides))
