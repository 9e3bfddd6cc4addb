"""What every engine in the registry owes the rest of neuronbuild, run over the shipped engines and
over a third that lives only in the tests (``tests/lib/toy_engine.py``, one module and one row):
its targets and recipe keys come from its row, its rules type its own keys, its units name the
machine a node image declares, ``doctor`` explains each factor it adds, ``serve --allow-mismatch``
takes its keys, and an engine without a conformance kit says so (issue 40 item 1)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.engines import registry
from neuronbuild.errors import RecipeInvalid, StoreDataInvalid
from neuronbuild.keys import explain_differences
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.records import Manifest
from neuronbuild_runtime.node_checks import mismatch_names
from tests.lib import toy_engine
from tests.lib.builders import cpu_recipe, neuron_recipe
from tests.runtime.test_conformance import command_exit

SAMPLES: dict[str, Callable[..., dict[str, Any]]] = {
    "cpu": cpu_recipe,
    "neuron": neuron_recipe,
    "toy": toy_engine.toy_recipe,
}
"""A valid recipe of each engine, with overrides."""

OCI_ARCHITECTURES = {"amd64", "arm64", "ppc64le", "s390x", "riscv64"}


@pytest.fixture(autouse=True)
def toy() -> Iterator[None]:
    with toy_engine.registered():
        yield


def errors_of(data: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(data)
    return {e.field: e.hint for e in caught.value.errors}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_a_recipe_is_judged_and_planned_by_the_engine_of_its_target(name: str) -> None:
    assert sorted(SAMPLES) == sorted(registry.engine_names())
    recipe = parse_recipe(SAMPLES[name]())
    row = registry.ENGINES[name]
    assert (recipe.engine, recipe.target in row.targets) == (name, True)
    assert sorted(recipe.fields) == sorted(row.fields)
    assert recipe.own_fields()["engine"] == name and set(row.fields) <= set(recipe.canonical())
    plan = build_plan(recipe, {})
    assert plan.units and {u.key.factors["engine"] for u in plan.units} == {name}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_key_an_engine_owns_is_refused_in_another_engines_recipe(name: str) -> None:
    for other, row in registry.ENGINES.items():
        for key in row.fields if other != name else ():
            hint = errors_of(SAMPLES[name](**{key: "x"})).get(key)
            assert hint == f"only applies to target {' or '.join(row.targets)}; remove it"


def test_the_engine_types_its_own_key() -> None:
    assert errors_of(toy_engine.toy_recipe(toy_chip=None)) == {"toy_chip": "must be one of t1, t2"}
    assert errors_of(cpu_recipe(cpu_isa=3)) == {"cpu_isa": "must be a string; put it in quotes"}
    assert "toy_chip" in errors_of(toy_engine.toy_recipe(toy_chip="t9"))


def test_a_target_is_one_the_registry_names() -> None:
    hint = errors_of(cpu_recipe(target="gpu"))["target"]
    assert hint == "must be one of 'cpu', 'trn1', 'trn2', 'trn3', 'inf2' or 'toy'"
    assert errors_of(cpu_recipe(engine="toy"))["engine"].startswith("target cpu is compiled by")
    assert errors_of(cpu_recipe(target=5))["target"] == hint  # judged as a name, as a Literal was
    nulled = {**neuron_recipe(), "cpu_isa": None, "toy_chip": None}  # null: unset, as before
    assert parse_recipe(nulled).fields == {}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_factor_an_engine_adds_is_explained_and_names_a_machine(name: str) -> None:
    plan = build_plan(parse_recipe(SAMPLES[name]()), {})
    engine = registry.get_engine(name)
    for unit in plan.units:
        factors = dict(unit.key.factors)
        assert engine.image_architecture(factors) in OCI_ARCHITECTURES
        unexplained = [
            line
            for line in explain_differences(factors, engine.factor_meanings)
            if line.endswith(": an engine factor differs")
        ]
        assert unexplained == []


def test_a_node_image_declares_the_machine_its_engine_names() -> None:
    from neuronbuild.image.build import architecture
    from neuronbuild.store.records import UnitRecord

    def manifest(factors: dict[str, Any]) -> Manifest:
        unit = UnitRecord("sha256:" + "0" * 64, factors, (), (), {})
        return Manifest("toy", {}, (unit,))

    assert architecture(manifest({"engine": "toy", "toy_chip": "t1"})) == "riscv64"
    assert architecture(manifest({"engine": "cpu", "cpu_isa": "aarch64+sve"})) == "arm64"
    assert architecture(manifest({"engine": "neuron", "target": "trn2"})) == "amd64"
    with pytest.raises(StoreDataInvalid, match="unknown toy_chip 't9'"):
        architecture(manifest({"engine": "toy", "toy_chip": "t9"}))
    with pytest.raises(StoreDataInvalid, match="unknown engine 'gpu'"):
        architecture(manifest({"engine": "gpu"}))


def test_serve_refuses_a_node_that_differs_in_an_engines_own_key_unless_allowed(
    tmp_path: Path,
) -> None:
    from neuronbuild_runtime.node_checks import NodeMismatch, check_node

    assert set(mismatch_names()) == {"target", "model_files", "weights", "cpu_isa", "toy_chip"}
    recipe = parse_recipe(toy_engine.toy_recipe())
    units = [dict(u.key.factors) for u in build_plan(recipe, {}).units]
    engine = registry.get_engine("toy")
    with pytest.raises(NodeMismatch, match="pass --allow-mismatch toy_chip"):
        check_node(recipe, engine, units, tmp_path, {})
    [allowed] = check_node(recipe, engine, units, tmp_path, {}, allow=("toy_chip",))
    assert (allowed.name, allowed.built_for, allowed.node) == ("toy_chip", "t2", "no toy chip")


@pytest.mark.parametrize("name", ["cpu", "toy"])
def test_an_engine_without_a_conformance_kit_says_so_in_one_line(name: str, tmp_path: Path) -> None:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(SAMPLES[name]()))
    err = io.StringIO()
    with redirect_stderr(err):
        code = command_exit(["conformance", str(path), "--cache", str(tmp_path)], io.StringIO())
    lines = [line for line in err.getvalue().splitlines() if not line.startswith("warning: ")]
    assert code == 2
    assert lines == [
        f"error: {path}: engine is {name}, which offers no conformance kit; the kit checks "
        "recipes of engine neuron (target trn1, trn2, trn3, inf2)"
    ]
