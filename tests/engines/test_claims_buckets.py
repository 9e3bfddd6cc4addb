"""Each bucket rule of :mod:`neuronbuild.engines.neuron.buckets` at its boundary (issue 19): a
weakened rule (a bound off by one, a check dropped, a default list one entry short) plans graphs
vLLM-Neuron would never ask for, or lets through a recipe it refuses at start. The rules are pure,
so these call :func:`resolve_buckets` with a recipe's engine arguments and read what it resolves
or which fields it names."""

from __future__ import annotations

from typing import Any

import pytest

from neuronbuild.engines.neuron.buckets import (
    NeuronBuckets,
    check_bucket_list,
    positive_int,
    powers_of_two_then_max,
    resolve_buckets,
)

NC = "additional_config.neuron_config"


def resolve(neuron_config: dict[str, Any] | None = None, **args: Any) -> NeuronBuckets:
    buckets, errors = resolve_buckets(arguments(neuron_config, **args))
    assert not errors, [str(e) for e in errors]
    assert buckets is not None
    return buckets


def refused(neuron_config: dict[str, Any] | None = None, **args: Any) -> list[str]:
    """The fields named by the errors of a refused configuration."""
    buckets, errors = resolve_buckets(arguments(neuron_config, **args))
    assert buckets is None and errors
    return [e.field for e in errors]


def arguments(neuron_config: dict[str, Any] | None, **args: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "max_model_len": 4096,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 4096,
        "enable_prefix_caching": False,
    }
    if neuron_config is not None:
        base["additional_config"] = {"neuron_config": neuron_config}
    return {k: v for k, v in {**base, **args}.items() if v is not None}


@pytest.mark.parametrize(
    ("start", "maximum", "expected"),
    [
        (128, 4096, [128, 256, 512, 1024, 2048, 4096]),
        (128, 3000, [128, 256, 512, 1024, 2048, 3000]),
        (1, 8, [1, 2, 4, 8]),
        (1, 1, [1]),
        (128, 100, [100]),
    ],
)
def test_default_buckets_double_from_the_start_and_end_at_the_maximum_once(
    start: int, maximum: int, expected: list[int]
) -> None:
    assert powers_of_two_then_max(start, maximum) == expected


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("128,256", "f"),
        ([], "f"),
        ([128, True], "f[1]"),
        ([128, 2.0], "f[1]"),
        ([0, 128], "f[0]"),
        ([-128], "f[0]"),
        ([128, 128], "f"),
        ([256, 128], "f"),
    ],
)
def test_a_bucket_list_must_be_positive_integers_strictly_ascending(value: Any, field: str) -> None:
    [error] = check_bucket_list("f", value)
    assert error.field == field


def test_a_strictly_ascending_list_of_positive_integers_passes() -> None:
    assert check_bucket_list("f", [1, 2, 4096]) == []
    assert check_bucket_list("f", [1]) == []


def test_defaults_compile_every_power_of_two_prefill_and_decode_bucket() -> None:
    buckets = resolve()
    assert buckets.num_batched_tokens == [128, 256, 512, 1024, 2048, 4096]
    assert buckets.num_seqs == [1, 2, 4, 8]
    assert (buckets.kv_segment_size, buckets.decode_context_length) == (None, None)
    assert (buckets.max_num_batched_tokens, buckets.language) == (4096, True)


def test_max_num_batched_tokens_above_max_model_len_is_capped_to_it() -> None:
    buckets = resolve(max_num_batched_tokens=8192)
    assert buckets.max_num_batched_tokens == 4096
    assert buckets.num_batched_tokens[-1] == 4096
    assert buckets.kv_segment_size is None


def test_single_shot_prefill_stops_at_16384_tokens() -> None:
    assert resolve(max_model_len=16384, max_num_batched_tokens=16384).num_batched_tokens[-1] == (
        16384
    )
    assert refused(max_model_len=16385, max_num_batched_tokens=16385) == ["max_model_len"]


def test_max_num_batched_tokens_below_max_model_len_segments_prefill_at_exactly_that_size() -> None:
    buckets = resolve(max_num_batched_tokens=2048)
    assert (buckets.num_batched_tokens, buckets.kv_segment_size) == ([2048], [2048])
    assert refused(max_num_batched_tokens=3072) == ["max_num_batched_tokens"]
    assert refused(max_num_batched_tokens=1024, block_size=48) == ["max_num_batched_tokens"]
    assert resolve(max_num_batched_tokens=1024, block_size=64).kv_segment_size == [1024]
    assert refused({"num_batched_tokens_buckets": [1024, 2048]}, max_num_batched_tokens=2048) == [
        f"{NC}.num_batched_tokens_buckets"
    ]
    assert resolve({"num_batched_tokens_buckets": [2048]}, max_num_batched_tokens=2048)


def test_the_last_prefill_bucket_must_equal_max_num_batched_tokens() -> None:
    assert refused({"num_batched_tokens_buckets": [128, 2048]}) == [
        f"{NC}.num_batched_tokens_buckets"
    ]
    assert resolve({"num_batched_tokens_buckets": [128, 4096]}).num_batched_tokens == [128, 4096]


def test_listed_prefill_buckets_set_max_num_batched_tokens_when_it_is_absent() -> None:
    buckets = resolve({"num_batched_tokens_buckets": [512, 4096]}, max_num_batched_tokens=None)
    assert (buckets.max_num_batched_tokens, buckets.num_batched_tokens) == (4096, [512, 4096])
    assert refused(max_num_batched_tokens=None) == ["max_num_batched_tokens"]


def test_a_kv_segment_size_must_be_one_supported_size_divisible_by_the_block_size() -> None:
    field = f"{NC}.kv_segment_size_buckets"
    buckets = resolve({"kv_segment_size_buckets": [1024]}, max_num_batched_tokens=512)
    assert (buckets.num_batched_tokens, buckets.kv_segment_size) == ([1024], [1024])
    assert buckets.max_num_batched_tokens == 1024
    assert refused({"kv_segment_size_buckets": [1000]}) == [f"{field}[0]"]
    assert refused({"kv_segment_size_buckets": [1024]}, block_size=48) == [f"{field}[0]"]
    assert refused({"kv_segment_size_buckets": [1024, 2048]}) == [field]
    assert resolve({"kv_segment_size_buckets": [8192]}, max_model_len=16384).kv_segment_size == [
        8192
    ]


def test_listed_prefill_buckets_must_equal_the_kv_segment_sizes() -> None:
    same = {"kv_segment_size_buckets": [2048], "num_batched_tokens_buckets": [2048]}
    assert resolve(same, max_num_batched_tokens=2048).num_batched_tokens == [2048]
    other = {"kv_segment_size_buckets": [2048], "num_batched_tokens_buckets": [1024, 2048]}
    assert refused(other, max_num_batched_tokens=2048) == [f"{NC}.num_batched_tokens_buckets"]


def test_the_last_decode_bucket_must_equal_max_num_seqs() -> None:
    field = f"{NC}.num_seqs_buckets"
    assert resolve({"num_seqs_buckets": [2, 8]}).num_seqs == [2, 8]
    assert refused({"num_seqs_buckets": [2, 4]}) == [field]
    assert refused({"num_seqs_buckets": [2, 16]}) == [field]
    assert refused({"num_seqs_buckets": [8, 2]}) == [field]


def test_decode_context_buckets_are_multiples_of_128_below_max_model_len() -> None:
    field = f"{NC}.decode_context_length_buckets"
    ctx = resolve({"decode_context_length_buckets": [128, 3968]}).decode_context_length
    assert ctx == [128, 3968]
    assert refused({"decode_context_length_buckets": [1024, 4096]}) == [f"{field}[1]"]
    assert refused({"decode_context_length_buckets": [1000]}) == [f"{field}[0]"]
    assert refused({"decode_context_length_buckets": [2048, 1024]}) == [field]


def test_decode_context_parallelism_of_one_keeps_every_prefill_bucket() -> None:
    assert (
        resolve(decode_context_parallel_size=1).num_batched_tokens == resolve().num_batched_tokens
    )
    kept = resolve(decode_context_parallel_size=2, block_size=128).num_batched_tokens  # stride 256
    assert kept == [256, 512, 1024, 2048, 4096]


@pytest.mark.parametrize("setting", [None, True])
def test_prefix_caching_on_or_by_default_needs_segmented_prefill(setting: bool | None) -> None:
    assert refused(enable_prefix_caching=setting) == ["enable_prefix_caching"]
    assert resolve(enable_prefix_caching=setting, max_num_batched_tokens=2048)


def test_an_engine_is_vision_only_or_language_only_never_both() -> None:
    both = {"neuron_config": {}, "mm_language_model_only": True}
    assert refused(additional_config=both, mm_encoder_only=True) == [
        "additional_config.mm_language_model_only"
    ]
    assert refused(additional_config={"mm_language_model_only": "yes"}) == [
        "additional_config.mm_language_model_only"
    ]
    assert resolve(mm_encoder_only=True).language is False
    assert refused(additional_config={"neuron_config": [1]}) == [f"{NC}"]


@pytest.mark.parametrize("value", [0, -1, True, "8", 2.0, None])
def test_a_positive_integer_field_refuses_zero_negatives_bools_and_other_types(value: Any) -> None:
    [error] = positive_int("f", value)
    assert (error.field, error.value) == ("f", value)
    assert "positive integer" in error.hint
    assert positive_int("f", 1) == []


def test_a_misordered_bucket_list_is_told_the_sorted_list() -> None:
    [error] = check_bucket_list("f", [256, 128, 128])
    assert error.hint.endswith("e.g. [128, 256]")


def test_the_last_prefill_bucket_hint_says_whether_max_num_batched_tokens_was_capped() -> None:
    def hint(**args: Any) -> str:
        _, errors = resolve_buckets(arguments({"num_batched_tokens_buckets": [128, 2048]}, **args))
        [error] = errors
        return error.hint

    assert hint().endswith("end the list with 4096 or set max_num_batched_tokens to 2048")
    assert "max_num_batched_tokens (8192) is capped at max_model_len (4096); end the list " in (
        hint(max_num_batched_tokens=8192)
    )


def test_an_off_stride_largest_prefill_bucket_is_named_by_its_size() -> None:
    nc = {"num_batched_tokens_buckets": [384, 768, 4000]}
    _, errors = resolve_buckets(
        arguments(
            nc,
            max_model_len=4000,
            max_num_batched_tokens=4000,
            decode_context_parallel_size=3,
            block_size=128,
        )
    )
    [error] = errors
    assert "(max_num_batched_tokens = 4000) is not divisible by the DCP shard stride 384" in (
        error.hint
    )
