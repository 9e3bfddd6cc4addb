"""Phases as vLLM-Neuron extracts them and one configuration at compile and serve (fidelity rows A5,
A9, B10, D18, D19, E4, E6), run for real against the test double in ``tests/neuron_double``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.engines.vllm_args import vllm_cli_args
from neuronbuild.errors import RecipeInvalid
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, load_recipe, parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
from neuronbuild_runtime.serve import ServeSource, prepare
from tests.conftest import REPO, neuron_recipe
from tests.engines.test_neuron_engine import (
    compile_small,
    compiled_graphs,
    double,
    planned,
    setenv,
    small_recipe,
)
from tests.lib.hub import cache_config

__all__ = ["double"]  # the fixture, imported for the tests below

QWEN3_VL_CONFIG = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "model_type": "qwen3_vl",
    "vision_config": {"spatial_merge_size": 2, "patch_size": 16},
    "text_config": {"num_attention_heads": 32, "num_key_value_heads": 8},
}
"""What the plan and the double read of Qwen3-VL-8B-Instruct's config.json (its head counts as
the file states them: the double, like vLLM, fills absent ones from transformers' defaults)."""


def serve_and_count(
    recipe: Recipe, store: Store, root: Path, monkeypatch: pytest.MonkeyPatch
) -> subprocess.CompletedProcess[str]:
    """Serve ``recipe``'s latest build from ``store`` on a trn2 "node" (the double's API server)."""
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn2")
    prepared = prepare(ServeSource(recipe=recipe.source), TieredStore(store), cache_root=root)
    env = {**prepared.env, "NEURON_DOUBLE_DEVICE": "trn2"}
    return subprocess.run(prepared.argv, env=env, cwd=prepared.cwd, capture_output=True, text=True)


def compiled_and_served(
    recipe: Recipe, double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> subprocess.CompletedProcess[str]:
    """Compile ``recipe`` into a folder store against the double, check it built exactly the
    planned graphs, serve it, and check the server came up; returns the serve run."""
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_small(recipe, store, tmp_path)
    assert report.failed == 0, report.units
    assert sorted(compiled_graphs(double)) == sorted(planned(recipe))
    run = serve_and_count(recipe, store, tmp_path / "serve", monkeypatch)
    assert run.returncode == 0, run.stderr
    return run


def local_recipe(tmp_path: Path, config: dict[str, Any], **args: Any) -> Recipe:
    """A small text trn2 recipe on a local model folder with ``config`` as its config.json."""
    recipe = small_recipe(tmp_path, vision=False, **args)
    (tmp_path / "model" / "config.json").write_text(json.dumps(config))
    return load_recipe(recipe.source)


def hub_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: dict[str, Any]) -> None:
    """Qwen3-VL-8B-Instruct as vLLM finds it offline: ``config`` as its config.json in a snapshot
    of a Hugging Face cache under ``tmp_path`` (``main`` and the recipes' revision)."""
    import huggingface_hub.constants

    hub = tmp_path / "hub"
    cache_config(hub, "Qwen/Qwen3-VL-8B-Instruct", config, "0" * 40)
    setenv(monkeypatch, "HF_HUB_CACHE", str(hub))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))


@pytest.mark.slow
@pytest.mark.parametrize("vision_section", [True, False])
def test_the_qwen3_vl_recipe_compiles_every_graph_and_serves_them(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, vision_section: bool
) -> None:
    """With its vision_neuron_config, and (issue 42, row D13) without one: the plan reads the
    hub model's config.json from the local Hugging Face cache, as vLLM-Neuron reads it at start,
    so the vision encoder's default buckets are planned, compiled and served."""
    hub_config(tmp_path, monkeypatch, QWEN3_VL_CONFIG)
    path = REPO / "recipes" / "qwen3-vl-8b-trn2.yaml"
    if not vision_section:
        data = yaml.safe_load(path.read_text())
        additional = json.loads(data["additional_config"])
        del additional["vision_neuron_config"]
        data["additional_config"] = additional
        path = tmp_path / "no-vision-section.yaml"
        path.write_text(yaml.safe_dump(data))
    recipe = load_recipe(path)
    graphs = planned(recipe)
    vision = [g for g in graphs if g.startswith("vision")]
    assert vision and len(graphs) == 1 + 6 + len(vision)
    if vision_section:
        assert len(vision) == 2
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_small(recipe, store, tmp_path)
    assert report.failed == 0 and report.manifest is not None, report.units
    assert sorted(compiled_graphs(double)) == sorted(graphs)
    run = serve_and_count(recipe, store, tmp_path / "serve", monkeypatch)
    assert run.returncode == 0, run.stderr
    assert f"{len(graphs)} graphs loaded" in run.stdout


@pytest.mark.slow
def test_an_explicit_optimization_level_2_is_compiled_as_served(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM-Neuron keeps O2 only when --optimization-level is on the command line (row B10):
    # compile and serve both run the API server with the recipe's arguments.
    recipe = small_recipe(tmp_path, optimization_level=2)
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_small(recipe, store, tmp_path)
    assert report.failed == 0, report.units
    run = serve_and_count(recipe, store, tmp_path / "serve", monkeypatch)
    assert run.returncode == 0, run.stderr
    assert f"{len(planned(recipe))} graphs loaded" in run.stdout


@pytest.mark.slow
def test_listed_prefill_buckets_without_max_num_batched_tokens_compile_and_serve(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fidelity row D23: left out, vLLM's API server sets max_num_batched_tokens to 8192 on a
    96 GiB trn2 (2048 on a smaller device), not to the last listed bucket; the plugin would then
    refuse the list at start. The plan's value (16384) reaches vLLM at compile and at serve."""
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    nc = {"num_batched_tokens_buckets": [4096, 16384], "num_seqs_buckets": [1, 4]}
    nc["decode_context_length_buckets"] = [512]
    data = neuron_recipe(
        nc, name="d23", model="./model", max_model_len=16384, max_num_seqs=4,
        tensor_parallel_size=1, max_num_batched_tokens=None,
    )  # fmt: skip
    (tmp_path / "d23.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    recipe = load_recipe(tmp_path / "d23.yaml")
    run = compiled_and_served(recipe, double, tmp_path, monkeypatch)
    assert f"{len(planned(recipe))} graphs loaded" in run.stdout


def test_the_compile_run_gets_the_arguments_serve_passes(double: Path, tmp_path: Path) -> None:
    recipe = small_recipe(tmp_path, optimization_level=2)
    unit = build_plan(recipe).units[0]
    command = build_plan(recipe).engine.compiler().command(recipe, unit, tmp_path / "scratch")
    assert command.argv[1:3] == ["-m", "neuronbuild.engines.neuron.compile_worker"]
    assert json.loads(command.argv[-1]) == vllm_cli_args(recipe.engine_args)
    assert "--optimization-level" in json.loads(command.argv[-1])


@pytest.mark.slow
def test_the_compile_worker_stops_a_server_that_keeps_serving_once_it_is_healthy(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setenv(monkeypatch, "NEURON_DOUBLE_LISTEN", "1")  # the double's server never returns
    recipe = small_recipe(tmp_path)
    report = compile_small(recipe, Store(str(tmp_path / "store"), create=True), tmp_path)
    assert [u.status for u in report.units] == ["compiled", "compiled"], report.units
    assert report.seconds < 30


def test_an_explicit_optimization_level_is_keyed_apart_from_an_unset_one() -> None:
    def keys(**args: Any) -> list[str]:
        return [u.key.digest for u in build_plan(parse_recipe(neuron_recipe(**args))).units]

    # Unset and 1 both resolve to O1 on Neuron; an explicit 2 stays O2.
    assert keys(optimization_level=1) == keys()
    assert not set(keys(optimization_level=2)) & set(keys())
    assert keys(optimization_level=3) != keys(optimization_level=2)


def test_a_vision_language_kv_consumer_plans_no_vision_graph() -> None:
    data = neuron_recipe(
        kv_transfer_config={"kv_connector": "NeuronConnector", "kv_role": "kv_consumer"},
        additional_config={"vision_neuron_config": {"num_vision_tokens_buckets": [2048]}},
    )
    plan = build_plan(parse_recipe(data))
    assert [u.phase for u in plan.units] == ["decode"]
    assert {g.kind for g in plan.graphs} == {"decode"}


def test_a_vision_only_engine_is_the_one_vision_unit() -> None:
    data = neuron_recipe(
        mm_encoder_only=True,
        additional_config={"vision_neuron_config": {"num_vision_tokens_buckets": [2048, 4096]}},
    )
    [unit] = build_plan(parse_recipe(data)).units
    assert unit.phase == "vision" and len(unit.graphs) == 2


@pytest.mark.slow
def test_a_vision_only_engine_compiles_its_vision_graphs_alone(
    double: Path, tmp_path: Path
) -> None:
    recipe = small_recipe(tmp_path, mm_encoder_only=True)
    report = compile_small(recipe, Store(str(tmp_path / "store"), create=True), tmp_path)
    assert report.failed == 0, report.units
    assert sorted(compiled_graphs(double)) == ["vision 2048", "vision 4096"]


@pytest.mark.slow
def test_a_vision_language_kv_consumer_compiles_and_serves_decode_only(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = small_recipe(
        tmp_path, kv_transfer_config={"kv_connector": "NeuronConnector", "kv_role": "kv_consumer"}
    )
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_small(recipe, store, tmp_path)
    assert report.failed == 0, report.units
    assert {g.split()[0] for g in compiled_graphs(double)} == {"decode"}
    run = serve_and_count(recipe, store, tmp_path / "serve", monkeypatch)
    assert run.returncode == 0, run.stderr


def test_a_local_pooling_architecture_plans_no_decode(tmp_path: Path) -> None:
    recipe = local_recipe(tmp_path, {"architectures": ["BertForSequenceClassification"]})
    assert [u.phase for u in build_plan(recipe).units] == ["prefill"]
    generating = local_recipe(tmp_path, {"architectures": ["LlamaForCausalLM"]})
    assert [u.phase for u in build_plan(generating).units] == ["prefill", "decode"]
    # An explicit runner wins over the architecture.
    forced = local_recipe(tmp_path, {"architectures": ["LlamaForCausalLM"]}, runner="pooling")
    assert [u.phase for u in build_plan(forced).units] == ["prefill"]


def test_a_pooling_kv_consumer_that_builds_no_graph_is_refused_in_one_line(tmp_path: Path) -> None:
    # A consumer skips prefill and pooling skips decode: compile would seal an empty manifest that
    # serve then calls hostile (found by tests/engines/test_neuron_conformance.py).
    consumer = {"kv_connector": "NeuronNixlConnector", "kv_role": "kv_consumer"}
    with pytest.raises(RecipeInvalid) as info:
        local_recipe(tmp_path, {"architectures": ["BertModel"]}, kv_transfer_config=consumer)
    [error] = map(str, info.value.errors)
    assert error.startswith('kv_transfer_config.kv_role="kv_consumer": this engine builds no graph')


@pytest.mark.slow
def test_a_local_pooling_model_compiles_what_the_plugin_extracts(
    double: Path, tmp_path: Path
) -> None:
    recipe = local_recipe(tmp_path, {"architectures": ["Qwen3ForSequenceClassification"]})
    report = compile_small(recipe, Store(str(tmp_path / "store"), create=True), tmp_path)
    assert report.failed == 0, report.units
    assert sorted(compiled_graphs(double)) == sorted(planned(recipe))


@pytest.mark.slow
def test_a_local_vision_model_without_a_vision_config_gets_the_plugins_default_buckets(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The platform creates vision_neuron_config for any model with a vision_config (row D13).
    recipe = local_recipe(tmp_path, QWEN3_VL_CONFIG)
    assert [g for g in planned(recipe) if g.startswith("vision")] == ["vision 2048"]
    compiled_and_served(recipe, double, tmp_path, monkeypatch)
