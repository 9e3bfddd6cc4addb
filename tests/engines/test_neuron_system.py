"""The Neuron runtime library and driver against the build's release (issue 46 item 14): system
packages, read from the loaded module and the package database where they can be; older than
the release ships is a node difference naming what to upgrade; unreadable is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronbuild.engines.neuron import system
from neuronbuild.engines.neuron.releases import release_named
from neuronbuild.engines.registry import get_engine
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild_runtime import node_checks
from tests.conftest import REPO, neuron_recipe


def answers(**printed: str) -> object:
    """A ``query`` that prints ``printed[argv[0]]`` (None for a command not listed)."""
    return lambda argv: printed.get(argv[0].replace("-", "_"))


def test_versions_are_read_from_the_module_then_the_package_managers(tmp_path: Path) -> None:
    (tmp_path / system.DRIVER_VERSION).parent.mkdir(parents=True)
    (tmp_path / system.DRIVER_VERSION).write_text("2.30.2.0\n")
    found = system.node_versions(tmp_path, answers(dpkg_query="2.34.10.0-6e27b8d5b"))
    assert found == {system.DRIVER: "2.30.2.0", system.RUNTIME_LIB: "2.34.10.0"}
    found = system.node_versions(tmp_path / "none", answers(rpm="2.33.10.0", modinfo="2.29.0.0"))
    assert found == {system.DRIVER: "2.29.0.0", system.RUNTIME_LIB: "2.33.10.0"}
    assert system.node_versions(tmp_path / "none", answers()) == {}
    removed = answers(dpkg_query="rc  2.33.10.0-1\n")  # its configuration left, not installed
    assert system.RUNTIME_LIB not in system.node_versions(tmp_path / "none", removed)
    several = answers(rpm="2.33.10.0\n2.34.10.0\n")  # rpm lists each installed version
    assert system.node_versions(tmp_path / "none", several)[system.RUNTIME_LIB] == "2.34.10.0"
    installed = answers(dpkg_query="ii  2.34.10.0-6e27b8d5b\n")
    assert system.node_versions(tmp_path / "none", installed)[system.RUNTIME_LIB] == "2.34.10.0"


def test_the_release_table_gives_each_documented_release_its_runtime_and_driver() -> None:
    assert release_named("2.32.0").system == {
        system.RUNTIME_LIB: "2.34.10.0",
        system.DRIVER: "2.30.2.0",
    }
    assert release_named("2.33.0").system == release_named("2.33.1").system
    assert release_named("2.34.0").system == {}  # on no page we read: not compared


@pytest.mark.parametrize(
    ("here", "named"),
    [
        ({system.RUNTIME_LIB: "2.33.10.0", system.DRIVER: "2.30.2.0"}, [system.RUNTIME_LIB]),
        ({system.RUNTIME_LIB: "2.34.10.0", system.DRIVER: "2.29.0.0"}, [system.DRIVER]),
        ({system.RUNTIME_LIB: "2.35.30.0", system.DRIVER: "2.31.7.0"}, []),  # newer: fine
        ({}, []),  # nothing readable: nothing compared
        ({system.RUNTIME_LIB: "not a version"}, []),
    ],
)
def test_serve_names_a_runtime_or_driver_older_than_the_build_s_release(
    monkeypatch: pytest.MonkeyPatch, here: dict[str, str], named: list[str]
) -> None:
    monkeypatch.setenv("NEURONBUILD_NODE_TARGET", "trn2")
    monkeypatch.setattr("neuronbuild.engines.neuron.engine.node_versions", lambda: here)
    recipe = parse_recipe(neuron_recipe())  # Neuron 2.32.0's pins
    engine = get_engine("neuron")
    factors = dict(build_plan(recipe).units[0].key.factors)
    found = [m for m in node_checks.node_mismatches(recipe, engine, factors, REPO)]
    system_rows = [m for m in found if m.name in system.COMPONENTS]
    assert [m.name for m in system_rows] == named
    for row in system_rows:
        assert row.built_for.endswith("or newer (Neuron 2.32.0)") and "upgrade it" in row.node
    if named:
        with pytest.raises(node_checks.NodeMismatch) as refused:
            node_checks.check_node(recipe, engine, [factors], REPO, {})
        assert f"for {named[0]}: upgrade the system package" in str(refused.value)
        assert f"--allow-mismatch {named[0]}" in str(refused.value)
        allowed = node_checks.check_node(
            recipe, engine, [factors], REPO, {}, allow=[*named, *(m.name for m in found)]
        )
        assert {m.name for m in allowed} >= set(named)
