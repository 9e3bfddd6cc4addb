"""Unit keys mean exactly what was compiled (issue 9): equivalent recipes give equal keys, any
keyed change gives different ones, and keys come from the user's environment and model content."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from neuronbuild.data.vllm_data import NO_DEFAULT, ArgTables, env_vars
from neuronbuild.engines.env_classes import EnvClass
from neuronbuild.engines.neuron.buckets import powers_of_two_then_max
from neuronbuild.engines.neuron.engine import LORA_SHAPE_ARGS
from neuronbuild.engines.registry import get_engine
from neuronbuild.engines.vllm_args import value_problem
from neuronbuild.errors import RecipeInvalid
from neuronbuild.plan import build_plan
from neuronbuild.recipe import credential_args, parse_recipe
from tests.conftest import cpu_recipe, neuron_recipe
from tests.lib.properties import examples
from tests.test_properties import plausible_recipes

ENGINES = ("cpu", "neuron")


def keys(data: dict[str, Any], environ: dict[str, str] | None = None) -> list[str]:
    return [u.key.digest for u in build_plan(parse_recipe(data), environ or {}).units]


def base_recipe(engine: str) -> dict[str, Any]:
    return cpu_recipe() if engine == "cpu" else neuron_recipe()


def tables_of(engine: str) -> ArgTables:
    """The argument tables of the vLLM the engine's base recipe pins (vllm 0.24.0 for neuron)."""
    tables = get_engine(engine).arg_source(base_recipe(engine)["toolchain"]).tables
    assert tables is not None
    return tables


def defaults_of(engine: str) -> dict[str, Any]:
    """Engine arguments with a known default, except those every base recipe sets, that the vLLM
    the base recipe pins has."""
    defaults = get_engine(engine).arg_defaults()
    taken, known = set(base_recipe(engine)), tables_of(engine).defaults
    return {
        k: v for k, v in defaults.items() if v is not NO_DEFAULT and k not in taken and k in known
    }


def changed(value: Any) -> Any:
    """Some other value of the same kind."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    if isinstance(value, str):
        return value + "-x"
    if isinstance(value, list):
        return [*value, 1]
    if isinstance(value, dict):
        return {**value, "x": 1}
    return "x"


# Section 1: equivalent recipes give the same key.


cpu_recipes = st.builds(
    lambda length, seqs, tokens, dtype, seed: cpu_recipe(
        max_model_len=length, max_num_seqs=seqs, max_num_batched_tokens=tokens, dtype=dtype,
        seed=seed,
    ),
    st.sampled_from([128, 256, 1024, 4096]),
    st.integers(1, 16),
    st.sampled_from([128, 256, 2048]),
    st.sampled_from(["bfloat16", "float32"]),
    st.integers(0, 3),
)  # fmt: skip
RECIPES_OF = {"cpu": cpu_recipes, "neuron": plausible_recipes}
SETTINGS = settings(
    max_examples=examples(150),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def draw_valid(data: st.DataObject, engine: str) -> dict[str, Any]:
    """A generated recipe for ``engine`` that validates (a refused one says nothing of keys)."""
    recipe: dict[str, Any] = data.draw(RECIPES_OF[engine])
    try:
        parse_recipe(recipe)
    except RecipeInvalid:
        assume(False)
    return recipe


@SETTINGS
@given(st.data())
def test_adding_any_argument_at_its_default_or_reordering_never_changes_a_key(
    data: st.DataObject,
) -> None:
    engine = data.draw(st.sampled_from(ENGINES))
    recipe = draw_valid(data, engine)
    defaults = {k: v for k, v in defaults_of(engine).items() if k not in recipe}
    added = data.draw(st.lists(st.sampled_from(sorted(defaults)), max_size=6, unique=True))
    spelled = {**recipe, **{name: defaults[name] for name in added}}
    order = data.draw(st.permutations(sorted(spelled)))
    reordered = {name: spelled[name] for name in order}
    assert keys(reordered) == keys(recipe), f"added at default: {added}"


@SETTINGS
@given(st.data())
def test_changing_any_keyed_argument_always_changes_every_key(data: st.DataObject) -> None:
    engine = data.draw(st.sampled_from(ENGINES))
    recipe = draw_valid(data, engine)
    keyed = get_engine(engine).keyed_args
    defaults = {k: v for k, v in defaults_of(engine).items() if k in keyed and k not in recipe}
    name = data.draw(st.sampled_from(sorted(defaults)))
    # Without LoRA its slot sizes shape nothing (the neuron engine's resolved args drop them).
    assume(not (engine == "neuron" and name in LORA_SHAPE_ARGS and not recipe.get("enable_lora")))
    try:
        other = keys({**recipe, name: changed(defaults[name])})
    except RecipeInvalid:
        assume(False)  # a value the engine's rules refuse says nothing about keys
        raise
    assert not set(other) & set(keys(recipe)), name


@SETTINGS
@given(st.data())
def test_a_keyed_variable_always_changes_every_key_and_no_other_variable_does(
    data: st.DataObject,
) -> None:
    engine = data.draw(st.sampled_from(ENGINES))
    recipe = draw_valid(data, engine)
    classify = get_engine(engine).classify_env
    names = sorted({*env_vars(), *get_engine(engine).env_classes})
    name = data.draw(st.sampled_from(names))
    value = data.draw(st.sampled_from(["0", "1", "/tmp/x", "a b", "neuron_native"]))
    before, after = keys(recipe), keys(recipe, {name: value})
    # A keyed value the platform reads as unset (a switch's "0") is the default: no change.
    pins = recipe.get("toolchain") or {}
    unset = get_engine(engine).normalise_env(name, value, recipe.get("target"), pins) is None
    if classify(name) is EnvClass.KEYED and not unset:
        assert not set(before) & set(after), name
    else:
        assert before == after, name


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_serving_only_arguments_never_change_a_key(data: st.DataObject) -> None:
    engine = data.draw(st.sampled_from(ENGINES))
    tables = tables_of(engine)
    serving = sorted(get_engine(engine).serving_only_args & tables.defaults.keys())
    name = data.draw(st.sampled_from(serving))
    choices = tables.types[name].choices if name in tables.types else ()
    scalars = st.one_of(
        st.integers(0, 9), st.text(max_size=4), st.booleans(), st.sampled_from(choices or (0,))
    )
    value = data.draw(
        st.one_of(scalars, st.lists(scalars, min_size=1, max_size=2), st.just({"x": 1}))
    )
    assume(value_problem(name, value, tables) is None)  # validate refuses it: no key
    assume(not (name in credential_args(tables) and value))  # refused too (issue 43 item 7)
    recipe = base_recipe(engine)
    assert keys({**recipe, name: value}) == keys(recipe), name


def test_writing_out_the_default_bucket_lists_of_a_trn2_recipe_keeps_every_key() -> None:
    plain = neuron_recipe()
    written = neuron_recipe(
        {
            "num_batched_tokens_buckets": powers_of_two_then_max(128, 4096),
            "num_seqs_buckets": powers_of_two_then_max(1, 8),
        }
    )
    assert keys(written) == keys(plain)
    # max_num_batched_tokens left out: vLLM-Neuron derives it from the largest bucket.
    assert keys({k: v for k, v in written.items() if k != "max_num_batched_tokens"}) == keys(plain)


@pytest.mark.parametrize(
    "spelling",
    [
        {"additional_config": {}},
        {"additional_config": "{}"},
        {"additional_config": None},
        {"additional_config": {"neuron_config": {}}},
        {"additional_config": {"neuron_config": None}},
    ],
)
def test_an_empty_additional_config_or_neuron_config_equals_an_absent_one(
    spelling: dict[str, Any],
) -> None:
    assert keys(neuron_recipe(**spelling)) == keys(neuron_recipe())


def test_an_empty_additional_config_equals_an_absent_one_on_cpu_too() -> None:
    assert keys(cpu_recipe(additional_config={})) == keys(cpu_recipe())


def test_a_null_inside_hf_overrides_is_a_value_not_an_absent_key() -> None:
    # vLLM applies hf_overrides by config.update(hf_overrides_kw): the null reaches the config.
    nulled = keys(cpu_recipe(hf_overrides={"sliding_window": None}))
    assert nulled != keys(cpu_recipe())
    assert nulled != keys(cpu_recipe(hf_overrides={"sliding_window": {}}))
    assert keys(neuron_recipe(hf_overrides={"sliding_window": None})) != keys(neuron_recipe())
    # Key order is still no part of a key.
    assert keys(cpu_recipe(hf_overrides={"a": 1, "b": None})) == keys(
        cpu_recipe(hf_overrides={"b": None, "a": 1})
    )


@pytest.mark.parametrize(("engine", "block_size"), [("cpu", 128), ("neuron", 32)])
def test_block_size_stated_at_the_engines_default_keeps_every_key(
    engine: str, block_size: int
) -> None:
    recipe = base_recipe(engine)
    assert keys({**recipe, "block_size": block_size}) == keys(recipe)
    assert not set(keys({**recipe, "block_size": block_size * 2})) & set(keys(recipe))


def test_an_integer_for_a_float_default_is_that_float() -> None:
    assert keys(cpu_recipe(gpu_memory_utilization=0.92)) == keys(cpu_recipe())
    assert keys(cpu_recipe(gpu_memory_utilization=1)) == keys(
        cpu_recipe(gpu_memory_utilization=1.0)
    )


# Section 2: only what changes compiled output enters a key.


@pytest.mark.parametrize(
    "option",
    [
        {"download_dir": "/mnt/models"},
        {"safetensors_load_strategy": "eager"},
        {"load_format": "safetensors"},
        {"data_parallel_address": "10.0.0.1"},
        {"data_parallel_rpc_port": 13345},
        {"served_model_name": "llama"},
    ],
)
def test_weight_loading_address_and_port_options_stay_out_of_keys(option: dict[str, Any]) -> None:
    for engine in ENGINES:
        recipe = base_recipe(engine)
        assert keys({**recipe, **option}) == keys(recipe)


def test_a_serve_section_never_changes_a_key() -> None:
    served = cpu_recipe(serve={"chat_template": "t.jinja", "enable_auto_tool_choice": True})
    assert keys(served) == keys(cpu_recipe())


@pytest.mark.parametrize("path_var", ["TORCHINDUCTOR_CACHE_DIR", "VLLM_CACHE_ROOT", "HF_HOME"])
def test_path_valued_variables_never_enter_a_key(path_var: str) -> None:
    assert keys(cpu_recipe(), {path_var: "/tmp/torchinductor_root"}) == keys(cpu_recipe())


@pytest.mark.parametrize(
    "variable", ["NEURON_LOGICAL_NC_CONFIG", "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION"]
)
def test_lnc_and_kv_cap_fraction_change_every_neuron_key(variable: str) -> None:
    assert not set(keys(neuron_recipe(), {variable: "1"})) & set(keys(neuron_recipe()))
    assert keys(neuron_recipe(), {variable: "1"}) != keys(neuron_recipe(), {variable: "2"})


def test_keys_come_from_the_starting_environment_not_variables_the_process_sets() -> None:
    """Inductor sets TORCHINDUCTOR_CACHE_DIR (and could set any variable) once torch is imported;
    a key made after that must equal one made from a plain shell."""
    script = (
        "import json, os, sys; import neuronbuild; "
        "os.environ['TORCHINDUCTOR_FREEZING'] = '1'; os.environ['VLLM_PLUGINS'] = 'x'; "
        "from neuronbuild.plan import build_plan; from neuronbuild.recipe import parse_recipe; "
        "print(json.dumps([u.key.digest for u in build_plan(parse_recipe("
        "json.loads(sys.argv[1]))).units]))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "TORCHINDUCTOR_"))}
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cpu_recipe())],
        env=env,  # in the test's folder (conftest), where keys() resolves the model too
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out) == keys(cpu_recipe())


# A local model folder is identified by its content.


def write_model(folder: Path, architecture: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 64)


def test_swapping_config_json_under_the_same_path_makes_every_unit_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    write_model(tmp_path / "m", "LlamaForCausalLM")
    before = build_plan(parse_recipe(cpu_recipe(model="m")), {}).units
    assert before[0].key.factors["model_files"]["config.json"].startswith("sha256:")
    write_model(tmp_path / "m", "Qwen3ForCausalLM")
    after = build_plan(parse_recipe(cpu_recipe(model="m")), {}).units
    assert not {u.key.digest for u in before} & {u.key.digest for u in after}
    assert after[0].key.differences(before[0].key.factors) == ["model_files"]


def test_the_model_folder_key_does_not_depend_on_where_the_folder_lives(tmp_path: Path) -> None:
    for where in ("a", "b"):
        write_model(tmp_path / where / "m", "LlamaForCausalLM")
    recipes = []
    for where in ("a", "b"):
        path = tmp_path / where / "recipe.yaml"
        path.write_text(json.dumps(cpu_recipe(model="m")))
        recipes.append(path)
    from neuronbuild.recipe import load_recipe

    a, b = (build_plan(load_recipe(p), {}).units[0].key for p in recipes)
    assert a.digest == b.digest


# doctor names the factor of a miss.


def test_doctor_explains_a_miss_by_the_factor_that_caused_it(
    tmp_path: Path, started_with: Any
) -> None:
    from neuronbuild.orchestrate.doctor import diagnose
    from neuronbuild.recipe import load_recipe
    from neuronbuild.store.cas import Store
    from tests.conftest import publish_build

    write_model(tmp_path / "m", "LlamaForCausalLM")
    path = tmp_path / "recipe.yaml"
    path.write_text(json.dumps(cpu_recipe(cpu_isa="host", model="./m")))
    store = Store(str(tmp_path / "store"), create=True)
    publish_build(store, cpu_recipe(cpu_isa="host", model="./m"), tmp_path, "a", str(path))
    [hit] = diagnose(load_recipe(path), store)
    assert hit.cached
    write_model(tmp_path / "m", "Qwen3ForCausalLM")
    started_with(VLLM_PP_LAYER_PARTITION="1,1")
    path.write_text(json.dumps(cpu_recipe(cpu_isa="host", model="./m", block_size=256)))
    [miss] = diagnose(load_recipe(path), store)
    assert not miss.cached
    assert [d.split(":")[0] for d in miss.differences] == [
        "engine_args.block_size",
        "env.VLLM_PP_LAYER_PARTITION",
        "model_files.config.json",
    ]
    assert [e.split(":")[0] for e in miss.explanations] == ["engine_args", "env", "model_files"]
    assert "model folder's content" in miss.explanations[2]


def test_arguments_whose_default_depends_on_vllms_entry_point_are_always_keyed_on_cpu() -> None:
    """seed, dtype and max_num_batched_tokens default differently in LLM and the API server
    (cpu-engine-facts.md): there is no single default to leave them out against."""
    factors = build_plan(parse_recipe(cpu_recipe(seed=0)), {}).units[0].key.factors
    assert factors["engine_args"]["seed"] == 0


# The command-line regressions.


def dry_run_totals(recipe: Path, store: Path, env: dict[str, str]) -> dict[str, int]:
    argv = [sys.executable, "-m", "neuronbuild", "compile", str(recipe), "--cache", str(store)]
    result = subprocess.run(
        [*argv, "--dry-run", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    totals: dict[str, int] = json.loads(result.stdout)["recipes"][0]["n_units_by_status"]
    return totals


@pytest.mark.slow
def test_a_build_stays_cached_whatever_inductor_cache_dir_and_stops_when_config_json_changes(
    tmp_path: Path,
) -> None:
    from neuronbuild.store.cas import Store
    from tests.conftest import publish_build

    write_model(tmp_path / "m", "LlamaForCausalLM")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(json.dumps(cpu_recipe(cpu_isa="host", model="./m")))
    store = tmp_path / "store"
    publish_build(Store(str(store), create=True), cpu_recipe(cpu_isa="host", model="./m"),
                  tmp_path, "a", source=str(recipe))  # fmt: skip
    plain = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR_")}
    # As `make run` left it: Inductor's own cache folder in the environment.
    inductor = {**plain, "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_root"}
    for env in (plain, inductor):
        assert dry_run_totals(recipe, store, env)["cached"] == 1
    write_model(tmp_path / "m", "Qwen3ForCausalLM")
    assert dry_run_totals(recipe, store, plain)["missing"] == 1


def test_doctor_names_each_differing_factor_with_both_values_and_why() -> None:
    """The exact lines ``doctor`` prints for a miss (killed mutants of keys.factor_differences,
    keys._describe, keys.explain_differences and UnitKey.differences)."""
    from neuronbuild.keys import (
        UnitKey,
        differing_factors,
        explain_differences,
        factor_differences,
    )

    fits = "a" * 58  # its JSON is 60 characters: shown whole
    too_long = "b" * 59  # 61: cut to 57 and "..."
    mine = {
        "schema": "s",
        "engine_args": {"max_num_seqs": 4, "dtype": "bfloat16"},
        "env": {"b": 1, "a": 2},  # shown with sorted keys
        "model": fits,
        "revision": too_long,
    }
    theirs = {
        "schema": "s",
        "engine_args": {"max_num_seqs": 8, "dtype": "bfloat16", "seed": 0},
        "toolchain_x": 1,
        "env": None,
        "model": "m",
        "revision": "r",
        "target": "cpu",
    }
    lines = factor_differences(mine, theirs)
    assert lines == [
        "engine_args.max_num_seqs: recipe 4, manifest 8",
        "engine_args.seed: recipe null, manifest 0",
        'env: environment {"a": 2, "b": 1}, manifest null',
        f'model: recipe "{fits}", manifest "m"',
        f'revision: recipe "{too_long[:56]}..., manifest "r"',
        'target: recipe null, manifest "cpu"',
        "toolchain_x: recipe null, manifest 1",
    ]
    assert explain_differences((d.name for d in differing_factors(mine, theirs)), {}) == [
        "engine_args: a keyed engine argument differs after resolving vLLM's defaults",
        "env: a keyed environment variable differs from the build's; start the command with the "
        "same value (or unset it)",
        "model: the model string differs; vLLM keys it verbatim, so spell it as at compile",
        "revision: another hub revision of the model",
        "target: another target (device family or cpu)",
        "toolchain_x: an engine factor differs",
    ]
    assert UnitKey(mine).differences(theirs) == [
        "engine_args",
        "env",
        "model",
        "revision",
        "target",
        "toolchain_x",
    ]


def test_differing_factors_are_structured_and_formatted_once() -> None:
    from neuronbuild.keys import FactorDifference, differing_factors, factor_differences

    mine = {"engine_args": {"max_num_seqs": 8, "block_size": 16}, "target": "cpu"}
    theirs = {"engine_args": {"max_num_seqs": 4, "block_size": 16}, "target": "trn2"}
    assert differing_factors(mine, theirs) == [
        FactorDifference("engine_args.max_num_seqs", 8, 4),
        FactorDifference("target", "cpu", "trn2"),
    ]
    assert factor_differences(mine, theirs) == [
        "engine_args.max_num_seqs: recipe 8, manifest 4",
        'target: recipe "cpu", manifest "trn2"',
    ]
