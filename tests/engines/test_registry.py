"""Engines are found in one table of name -> import path -> install hint (issue 17): a third
engine is one row, a command imports only the engine it uses, and the package's face imports
nothing."""

from __future__ import annotations

import ast

import pytest

from neuronbuild.engines import registry
from neuronbuild.errors import UserError
from tests.conftest import REPO, cpu_recipe
from tests.lib import toy_engine
from tests.store.test_seams import loaded_by_planning


def test_the_engines_face_imports_nothing() -> None:
    tree = ast.parse((REPO / "neuronbuild" / "engines" / "__init__.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def test_a_third_engine_is_one_row() -> None:
    with toy_engine.registered():
        assert isinstance(registry.get_engine("toy"), toy_engine.ToyEngine)
        assert set(registry.installed_toolchains()) == {"cpu", "neuron", "toy"}
        assert registry.target_engines()["toy"] == "toy"
        assert registry.engine_fields() == {"cpu_isa": "cpu", "toy_chip": "toy"}
    assert "toy" not in registry.engine_names() and "toy" not in registry.target_engines()


def test_an_engine_whose_module_cannot_be_imported_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row = registry.EngineRow(
        "neuronbuild_no_such_engine:Engine", "pip install no-such-engine", ("absent",)
    )
    monkeypatch.setitem(registry.ENGINES, "absent", row)
    with pytest.raises(UserError, match=r"^engine absent: cannot import neuronbuild_no_such_eng"):
        registry.get_engine("absent")
    with pytest.raises(UserError, match=r"; pip install no-such-engine$"):
        registry.get_engine("absent")
    with pytest.raises(KeyError):
        registry.get_engine("gpu")


def test_planning_a_cpu_recipe_imports_no_other_engine() -> None:
    assert loaded_by_planning(cpu_recipe(), "neuronbuild.engines.neuron.engine") == ("cpu", [])
