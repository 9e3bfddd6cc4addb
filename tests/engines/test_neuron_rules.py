"""vLLM-Neuron's rules the plan mirrors beyond bucket lists: prefix caching, kv-only segments,
decode context parallelism, KV roles, pooling, speculative decoding, LoRA, release sets."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from neuronbuild.engines.neuron.compile import classify_failure
from neuronbuild.errors import RecipeInvalid
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from tests.conftest import NEURON_TOOLCHAIN, neuron_recipe


def errors_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(RecipeInvalid) as info:
        parse_recipe(data)
    return [str(e) for e in info.value.errors]


def phases(data: dict[str, Any]) -> dict[str, Counter[str]]:
    plan = build_plan(parse_recipe(data))
    return {str(u.phase): Counter(g.kind for g in u.graphs) for u in plan.units}


def test_single_shot_prefill_with_default_prefix_caching_is_refused() -> None:
    [error] = errors_of(neuron_recipe(enable_prefix_caching=None))
    assert error.startswith("enable_prefix_caching: automatic prefix caching")
    assert "enable_prefix_caching: false" in error


def test_segmented_prefill_keeps_prefix_caching() -> None:
    parse_recipe(neuron_recipe(enable_prefix_caching=None, max_num_batched_tokens=2048))


def test_kv_segments_alone_set_the_prefill_buckets_and_raise_max_num_batched_tokens() -> None:
    data = neuron_recipe({"kv_segment_size_buckets": [2048]}, max_num_batched_tokens=1024)
    plan = build_plan(parse_recipe(data))
    prefill = [g.to_json() for g in plan.graphs if g.kind == "prefill"]
    assert prefill == [{"kind": "prefill", "num_batched_tokens": 2048, "kv_segment_size": 2048}]
    assert plan.units[0].key.factors["engine_args"]["max_num_batched_tokens"] == 2048


def test_decode_context_parallelism_drops_prefill_buckets_off_the_shard_stride() -> None:
    data = neuron_recipe(decode_context_parallel_size=4, block_size=128)  # stride 512
    prefill = [g.dims[0][1] for g in build_plan(parse_recipe(data)).graphs if g.kind == "prefill"]
    assert prefill == [512, 1024, 2048, 4096]


def test_decode_context_parallelism_errors_when_the_largest_bucket_is_off_the_stride() -> None:
    nbt = {"num_batched_tokens_buckets": [768, 4096]}
    # tensor_parallel_size 48: a multiple of dcp 3, so the platform's DCP checks pass.
    dcp = {"decode_context_parallel_size": 3, "block_size": 128, "tensor_parallel_size": 48}
    data = neuron_recipe(nbt, **dcp)  # stride 384
    [error] = errors_of(data)
    assert error.startswith("decode_context_parallel_size=3: the largest prefill bucket")
    [error] = errors_of(neuron_recipe(**dcp))
    assert error.startswith("decode_context_parallel_size=3: no prefill bucket")


def test_a_kv_producer_builds_prefill_only_and_a_consumer_decode_only() -> None:
    producer = neuron_recipe(kv_transfer_config={"kv_connector": "X", "kv_role": "kv_producer"})
    consumer = neuron_recipe(kv_transfer_config={"kv_connector": "X", "kv_role": "kv_consumer"})
    assert list(phases(producer)) == ["prefill"]
    assert list(phases(consumer)) == ["decode"]


def test_a_pooling_runner_builds_no_decode_graphs() -> None:
    assert list(phases(neuron_recipe(runner="pooling"))) == ["prefill"]


def test_speculative_decoding_adds_its_twin_and_drafter_graphs() -> None:
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "model": "drafter"}
    data = neuron_recipe({"num_seqs_buckets": [1, 4]}, max_num_seqs=4, speculative_config=spec)
    plan = phases(data)
    assert plan["prefill"] == Counter({"prefill": 6, "draft_prefill": 6})
    assert plan["decode"] == Counter({"decode": 2, "decode_no_spec": 2, "draft_decode": 2})
    drafts = [g for g in build_plan(parse_recipe(data)).graphs if g.kind == "draft_decode"]
    assert [dict(g.dims)["draft_num_tokens"] for g in drafts] == [4, 16]


def test_an_unknown_speculative_method_is_refused() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 3}
    [error] = errors_of(neuron_recipe(speculative_config=spec))
    assert error.startswith('speculative_config.method="ngram"')


def test_lora_is_refused_before_neuron_2_34() -> None:
    [error] = errors_of(neuron_recipe(enable_lora=True))
    assert error.startswith("enable_lora=true: the pinned vLLM Neuron release serves no LoRA")
    assert "pin the Neuron 2.34 release set" in error


def test_a_compiler_from_another_release_is_refused_with_the_right_version() -> None:
    data = neuron_recipe(toolchain={**NEURON_TOOLCHAIN, "neuronx-cc": "2.26.6360.0"})
    [error] = errors_of(data)
    assert "toolchain.neuronx-cc" in error and "runs with neuronx-cc 2.27.5334.0" in error


def test_torch_neuronx_is_refused_where_the_release_ships_none() -> None:
    data = neuron_recipe(toolchain={**NEURON_TOOLCHAIN, "torch-neuronx": "2.9.0.2.15.32035"})
    [error] = errors_of(data)
    assert error.startswith('toolchain.torch-neuronx="2.9.0.2.15.32035": Neuron 2.32.0 ships no')


def test_the_2_31_1_release_set_needs_its_torch_neuronx() -> None:
    pins = {
        "vllm": "0.21.0",
        "vllm-neuron": "0.21.0.1.0.0",
        "neuronx-cc": "2.26.6360.0",
        "nki": "0.5.0",
        "libtorch-neuronx-lite": "2.11.0.1.0.696",
    }
    [error] = errors_of(neuron_recipe(toolchain=pins))
    assert error.startswith("toolchain.torch-neuronx: vllm-neuron 0.21.0.1.0.0 runs with")
    assert "(Neuron 2.31.1: 2.9.0.2.15.32035); pin the one installed" in error
    parse_recipe(neuron_recipe(toolchain={**pins, "torch-neuronx": "2.9.0.2.15.32035"}))


@pytest.mark.parametrize(
    ("code", "log", "retry", "error_code"),
    [
        (
            1,
            "RuntimeError: neuronx-cc compilation failed with 70. Check",
            "backoff",
            "neuronx-cc exit 70",
        ),
        (1, "[NCC_INLA001] boom\nneuronx-cc compilation failed with 70.", "none", "NCC_INLA001"),
        (-9, "", "fewer_workers", "SIGKILL"),
        (1, "neuronx-cc compilation failed with -9. Check", "fewer_workers", "SIGKILL"),
        (1, "neuronx-cc compilation failed with 1. Check", "none", "neuronx-cc exit 1"),
        (1, "FATAL: Shared compilation timeout after 600 s", "none", None),
    ],
)
def test_failures_are_read_from_the_log(
    code: int, log: str, retry: str, error_code: str | None
) -> None:
    failure = classify_failure(code, log)
    assert (failure.retry, failure.code) == (retry, error_code)


def test_the_failing_bucket_is_named_where_the_log_names_it() -> None:
    log = "RuntimeError: Model graph extraction failed for decode (batch=4, seq=4096): x"
    assert classify_failure(1, log).bucket == "decode (batch=4, seq=4096)"
