"""vLLM-Neuron's vision plan (fidelity rows D13-D16, E5): a vision config for every model with a
``vision_config``, the default buckets, the refused combinations, vision tp/dp, and one line naming
the recipe field when the plan needs a fact a hub model's plan cannot read."""

from __future__ import annotations

import copy
import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.engines.registry import get_engine
from neuronbuild.errors import RecipeInvalid
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, load_recipe, parse_recipe
from tests.conftest import neuron_recipe
from tests.engines.test_neuron_phases import QWEN3_VL_CONFIG
from tests.neuron_double import SITE

VNC = "additional_config.vision_neuron_config"


def local(
    tmp_path: Path,
    vnc: dict[str, Any] | None = None,
    config: dict[str, Any] | None = None,
    **args: Any,
) -> Recipe:
    """A trn2 recipe on a local Qwen3-VL folder (merge factor 4, patch 16), 1 rank unless told."""
    (tmp_path / "model").mkdir(exist_ok=True)
    (tmp_path / "model" / "config.json").write_text(json.dumps(config or QWEN3_VL_CONFIG))
    data = neuron_recipe(**{"model": "./model", "tensor_parallel_size": 1, **args})
    if vnc is not None:
        data.setdefault("additional_config", {})["vision_neuron_config"] = vnc
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_recipe(path)


def vision_of(recipe: Recipe) -> list[int]:
    return [
        dict(g.dims)["num_vision_tokens"] for g in build_plan(recipe).graphs if g.kind == "vision"
    ]


def errors_of(tmp_path: Path, vnc: dict[str, Any] | None = None, **args: Any) -> list[str]:
    with pytest.raises(RecipeInvalid) as info:
        local(tmp_path, vnc, **args)
    return [str(e) for e in info.value.errors]


def test_a_local_vision_model_gets_a_vision_config_without_asking(tmp_path: Path) -> None:
    # max_model_len 4096 x merge factor 4 = 16384, capped at the block (2048) by default.
    assert vision_of(local(tmp_path)) == [2048]


def test_default_buckets_run_from_the_block_to_the_merged_max_model_len_or_the_cap(
    tmp_path: Path,
) -> None:
    assert vision_of(local(tmp_path, {"max_vision_seq_len": 65536})) == [2048, 4096, 8192, 16384]
    assert vision_of(local(tmp_path, {"max_vision_seq_len": 8192})) == [2048, 4096, 8192]
    # Without a merge rule for the class the factor is 1.
    plain = {**QWEN3_VL_CONFIG, "architectures": ["SomeVisionForConditionalGeneration"]}
    assert vision_of(local(tmp_path, {"max_vision_seq_len": 65536}, plain)) == [2048, 4096]


def test_max_pixels_raises_the_block_to_the_next_power_of_two(tmp_path: Path) -> None:
    # 3000 patches of 16x16 need a 4096-token block.
    recipe = local(
        tmp_path, {"max_vision_seq_len": 16384}, mm_processor_kwargs={"max_pixels": 3000 * 256}
    )
    assert vision_of(recipe) == [4096, 8192, 16384]


def test_a_bucket_list_with_max_vision_seq_len_is_refused(tmp_path: Path) -> None:
    [error] = errors_of(tmp_path, {"num_vision_tokens_buckets": [2048], "max_vision_seq_len": 4096})
    assert error.startswith(f"{VNC}.max_vision_seq_len")
    assert "cannot be set with num_vision_tokens_buckets" in error


def test_a_largest_bucket_below_the_attention_block_is_refused(tmp_path: Path) -> None:
    [error] = errors_of(tmp_path, {"num_vision_tokens_buckets": [512, 1024]})
    assert error.startswith(f"{VNC}.num_vision_tokens_buckets")
    assert "below vision_attention_block_size (2048)" in error


@pytest.mark.parametrize(
    ("vnc", "ranks", "ok"),
    [
        ({"tp_size": 2}, 8, True),  # dp inferred: 4
        ({"dp_size": 8}, 8, True),  # tp inferred: 1
        ({"tp_size": 2, "dp_size": 4}, 8, True),
        ({"tp_size": 1, "dp_size": 1}, 8, True),  # both default: dp = world
        ({"dp_size": 3}, 8, False),
        ({"tp_size": 2, "dp_size": 2}, 8, False),
    ],
)
def test_vision_tp_and_dp_are_inferred_as_the_plugin_infers_them(
    tmp_path: Path, vnc: dict[str, Any], ranks: int, ok: bool
) -> None:
    vnc = {"num_vision_tokens_buckets": [2048], **vnc}
    if ok:
        local(tmp_path, vnc, tensor_parallel_size=ranks)
    else:
        [error] = errors_of(tmp_path, vnc, tensor_parallel_size=ranks)
        assert error.startswith(f"{VNC}.")


def test_a_hub_model_names_the_field_that_supplies_the_merge_factor() -> None:
    data = neuron_recipe(additional_config={"vision_neuron_config": {"max_vision_seq_len": 65536}})
    with pytest.raises(RecipeInvalid) as info:
        parse_recipe(data)
    [error] = info.value.errors
    assert str(error).startswith(f"{VNC}.num_vision_tokens_buckets")
    assert "\n" not in str(error) and "merge factor" in str(error)


def test_a_hub_model_with_max_pixels_names_the_field() -> None:
    data = neuron_recipe(
        mm_processor_kwargs={"max_pixels": 1 << 20},
        additional_config={"vision_neuron_config": {"num_vision_tokens_buckets": [2048]}},
    )
    with pytest.raises(RecipeInvalid) as info:
        parse_recipe(data)
    [error] = info.value.errors
    assert str(error).startswith("mm_processor_kwargs.max_pixels")


VISION_CASES = [
    ({}, {}),
    ({"max_vision_seq_len": 65536}, {}),
    ({"max_vision_seq_len": 16384}, {"mm_processor_kwargs": {"max_pixels": 3000 * 256}}),
    ({"num_vision_tokens_buckets": [2048, 8192]}, {}),
    ({"vision_attention_block_size": 1024, "max_vision_seq_len": 4096}, {"max_model_len": 512}),
    ({"num_vision_tokens_buckets": [2048]}, {"mm_encoder_only": True}),
]


@pytest.mark.parametrize(("vnc", "args"), VISION_CASES)
def test_the_double_extracts_the_vision_graphs_neuronbuild_plans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vnc: dict[str, Any], args: dict[str, Any]
) -> None:
    recipe = local(tmp_path, vnc or None, **args)
    monkeypatch.syspath_prepend(str(SITE))
    importlib.invalidate_caches()
    platform = importlib.import_module("vllm_neuron.platform")
    monkeypatch.chdir(recipe.workdir)
    started = get_engine("neuron").start_args(recipe)  # what compile and serve pass
    resolved = platform.resolve_config(copy.deepcopy(started), platform.HBM_GIB[recipe.target])
    extracted = [
        f"{kind} {' '.join(map(str, dims))}"
        for graphs in platform.plan(resolved, honour_skips=False).values()
        for kind, dims in graphs
    ]
    ours = [" ".join([g.kind, *(str(v) for _, v in g.dims)]) for g in build_plan(recipe).graphs]
    assert sorted(extracted) == sorted(ours)


@pytest.mark.parametrize(
    "vnc",
    [
        {"num_vision_tokens_buckets": [2048], "max_vision_seq_len": 4096},
        {"num_vision_tokens_buckets": [1024]},
        {"max_vision_seq_len": 1024},
    ],
)
def test_the_double_refuses_at_start_what_the_plan_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vnc: dict[str, Any]
) -> None:
    errors_of(tmp_path, vnc)  # neuronbuild refuses it
    args = {**neuron_recipe(model="./model", tensor_parallel_size=1), "additional_config": {}}
    args["additional_config"]["vision_neuron_config"] = vnc
    monkeypatch.syspath_prepend(str(SITE))
    importlib.invalidate_caches()
    platform = importlib.import_module("vllm_neuron.platform")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError):
        platform.resolve_config(args, platform.HBM_GIB["trn2"])


def test_a_vision_config_for_a_local_model_without_a_vision_section_is_refused(
    tmp_path: Path,
) -> None:
    [error] = errors_of(tmp_path, {"num_vision_tokens_buckets": [2048]}, config={"x": 1})
    assert error.startswith(VNC) and "no vision_config" in error


def test_a_malformed_vision_section_reads_as_absent_fields_not_a_traceback(tmp_path: Path) -> None:
    bad = {**QWEN3_VL_CONFIG, "vision_config": {"spatial_merge_size": "two", "patch_size": None}}
    recipe = local(
        tmp_path, {"max_vision_seq_len": 65536}, bad, mm_processor_kwargs={"max_pixels": 1}
    )
    assert vision_of(recipe) == [2048, 4096]  # merge factor 1, no max_pixels rule


@pytest.mark.parametrize(
    "vnc",
    [{"max_vision_seq_len": 1024}, {"tp_size": 2}],
    ids=["cap-below-block", "tp-over-world"],
)
def test_a_language_only_engine_on_a_local_vl_model_keeps_the_vision_refusals(
    tmp_path: Path, vnc: dict[str, Any]
) -> None:
    # The platform resolves a VL model's vision config and the worker its tp/dp whatever the
    # EPD role (found by tests/engines/test_neuron_conformance.py; rows D15, D16, D20).
    [error] = errors_of(tmp_path, vnc, additional_config={"mm_language_model_only": True})
    assert error.startswith(f"{VNC}.")
