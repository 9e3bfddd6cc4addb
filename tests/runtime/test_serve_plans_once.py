"""``serve`` parses and plans each recipe once (issue 21, item 4): the recipe file it was given
and the manifest's sealed recipe, whose plan every check (the recipe file's match, coverage,
the manifest's own units) is handed rather than planning it again."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.plan import Plan
from neuronbuild.recipe import Recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
from neuronbuild_runtime import serve
from neuronbuild_runtime.serve import ServeSource, prepare
from tests.conftest import cpu_recipe, publish_build

Calls = dict[str, Counter[str]]


def text(recipe: Recipe) -> str:
    return json.dumps(recipe.canonical(), sort_keys=True)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Calls:
    """Every recipe serve plans (``build_plan``), parses (``parse_recipe``) or loads
    (``load_recipe``), by its canonical text, counted as ``serve`` calls them."""
    counted: Calls = {"build_plan": Counter(), "parse_recipe": Counter(), "load_recipe": Counter()}
    real_plan, real_parse, real_load = serve.build_plan, serve.parse_recipe, serve.load_recipe

    def build_plan(recipe: Recipe, *args: Any, **kw: Any) -> Plan:
        counted["build_plan"][text(recipe)] += 1
        return real_plan(recipe, *args, **kw)

    def parse_recipe(data: Any, *args: Any, **kw: Any) -> Recipe:
        recipe = real_parse(data, *args, **kw)
        counted["parse_recipe"][text(recipe)] += 1
        return recipe

    def load_recipe(path: Any) -> Recipe:
        recipe = real_load(path)
        counted["load_recipe"][text(recipe)] += 1
        return recipe

    monkeypatch.setattr(serve, "build_plan", build_plan)
    monkeypatch.setattr(serve, "parse_recipe", parse_recipe)
    monkeypatch.setattr(serve, "load_recipe", load_recipe)
    return counted


def published(tmp_path: Path, **served: Any) -> tuple[Path, TieredStore]:
    """A recipe file beside its model folder, one build of it published: (recipe file, tiers).
    ``served``: changes to the file after the build that plan the same units."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    data = cpu_recipe(cpu_isa="host", model="./m")
    recipe = tmp_path / "recipe.yaml"
    store = Store(str(tmp_path / "store"), create=True)
    publish_build(store, data, tmp_path, "a", source=str(recipe))
    recipe.write_text(json.dumps({**data, **served}))
    return recipe, TieredStore(store)


def prepared(source: ServeSource, tiers: TieredStore, tmp_path: Path) -> None:
    prepare(source, tiers, cache_root=tmp_path / "root", dry_run=True, check_address=False)


def test_a_recipe_file_sealed_unchanged_is_loaded_and_planned_once(
    tmp_path: Path, calls: Calls
) -> None:
    recipe, tiers = published(tmp_path)
    prepared(ServeSource(recipe=str(recipe)), tiers, tmp_path)
    [loaded] = calls["load_recipe"]
    assert calls["load_recipe"] == {loaded: 1}
    assert calls["build_plan"] == {loaded: 1}  # the sealed recipe is the file's: its plan
    assert not calls["parse_recipe"]


def test_a_recipe_file_that_differs_from_the_sealed_one_in_serving_only_plans_each_once(
    tmp_path: Path, calls: Calls
) -> None:
    recipe, tiers = published(tmp_path, serve={"chat_template": "t.jinja"})
    prepared(ServeSource(recipe=str(recipe)), tiers, tmp_path)
    [loaded], [sealed] = calls["load_recipe"], calls["parse_recipe"]
    assert loaded != sealed
    assert calls["load_recipe"] == {loaded: 1} and calls["parse_recipe"] == {sealed: 1}
    assert calls["build_plan"] == {loaded: 1, sealed: 1}


def test_a_ref_parses_and_plans_its_sealed_recipe_once(tmp_path: Path, calls: Calls) -> None:
    _, tiers = published(tmp_path)
    prepared(ServeSource(ref="tiny/latest"), tiers, tmp_path)
    [sealed] = calls["parse_recipe"]
    assert calls["parse_recipe"] == {sealed: 1}
    assert calls["build_plan"] == {sealed: 1}
    assert not calls["load_recipe"]
