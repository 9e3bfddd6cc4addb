"""Checks a user meets before any work (issue 12, "Checks and help"): duplicate YAML keys,
``cpu_isa`` names, what ``compile --dry-run`` lists and checks, ``doctor``'s summary and colour,
every command's help, ``--version`` and ``-v/-q``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import RecipeInvalid
from neuronbuild.recipe import load_recipe
from tests.conftest import cpu_recipe, neuron_recipe, neuronbuild

# Duplicate keys.


def test_a_top_level_key_given_twice_is_refused_with_both_lines(write_recipe: Any) -> None:
    path = write_recipe("name: first\ntarget: cpu\nname: second\n")
    with pytest.raises(RecipeInvalid) as caught:
        load_recipe(path)
    assert [str(e) for e in caught.value.errors] == [
        "name: duplicate key, at lines 1 and 3; YAML would keep only the last silently: delete one"
    ]
    result = neuronbuild("validate", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"{path}: {caught.value.errors[0]}"]


def test_a_nested_neuron_config_key_given_twice_is_refused_with_its_path(
    write_recipe: Any,
) -> None:
    import yaml

    text = yaml.safe_dump(neuron_recipe({"batch_size": 8}), sort_keys=False)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "batch_size" in line)
    lines.insert(at + 1, lines[at].replace("8", "4"))  # the same key, one line below
    with pytest.raises(RecipeInvalid) as caught:
        load_recipe(write_recipe("\n".join(lines) + "\n"))
    assert [e.field for e in caught.value.errors] == ["additional_config.neuron_config.batch_size"]
    assert f"at lines {at + 1} and {at + 2}" in str(caught.value.errors[0])


def test_a_serve_option_given_twice_is_refused(write_recipe: Any) -> None:
    import yaml

    text = yaml.safe_dump(cpu_recipe(cpu_isa="host"), sort_keys=False)
    path = write_recipe(text + "serve:\n  port: 8000\n  host: 0.0.0.0\n  port: 9000\n")
    with pytest.raises(RecipeInvalid) as caught:
        load_recipe(path)
    assert [e.field for e in caught.value.errors] == ["serve.port"]


def test_keys_that_load_as_different_values_are_not_duplicates() -> None:
    import yaml

    from neuronbuild.recipe import duplicate_keys

    assert duplicate_keys(yaml.compose("a:\n  1: x\n  '1': y\n  b: [{c: 1}, {c: 2}]\n")) == []
    [error] = duplicate_keys(yaml.compose("a:\n  - {c: 1, c: 2}\n"))
    assert error.field == "a[0].c"


# cpu_isa names.


@pytest.mark.parametrize(
    ("isa", "why"),
    [
        ("banana", "unknown machine 'banana'"),
        ("x86_64", "x86_64 needs a level"),
        ("x86_64-v9", "x86_64 needs a level"),
        ("aarch64-v2", "aarch64 has no levels"),
        ("x86_64-v3+sve", "unknown x86_64 extension 'sve'"),
    ],
)
def test_validate_refuses_a_cpu_isa_that_names_no_instruction_set(
    write_recipe: Any, isa: str, why: str
) -> None:
    with pytest.raises(RecipeInvalid) as caught:
        load_recipe(write_recipe(cpu_recipe(cpu_isa=isa)))
    [error] = caught.value.errors
    assert error.field == "cpu_isa" and why in error.hint
    assert "`neuronbuild isa`" in error.hint


@pytest.mark.parametrize("isa", ["host", "x86_64-v1", "x86_64-v4+amx_bf16", "aarch64+sve+bf16"])
def test_validate_accepts_real_instruction_sets(write_recipe: Any, isa: str) -> None:
    assert load_recipe(write_recipe(cpu_recipe(cpu_isa=isa))).cpu_isa == isa


def test_compile_and_its_dry_run_refuse_cpu_isa_banana_writing_nothing(
    write_recipe: Any, tmp_path: Path
) -> None:
    path = write_recipe(cpu_recipe(cpu_isa="banana"))
    for extra in ([], ["--dry-run"]):
        result = neuronbuild("compile", str(path), "--cache", str(tmp_path / "store"), *extra)
        assert result.returncode == 2
        assert result.stderr.startswith(f'{path}: cpu_isa="banana": not an instruction set')
    assert not (tmp_path / "store").exists()
