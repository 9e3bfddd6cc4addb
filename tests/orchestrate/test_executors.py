"""Executors are found from one table, and a Ray task reports its retries as a local worker does."""

from __future__ import annotations

import subprocess
import sys

import pytest

from neuronbuild import notices
from neuronbuild.errors import UserError
from neuronbuild.graph import CompileUnit
from neuronbuild.orchestrate import executor
from neuronbuild.orchestrate.executor import EXECUTORS, LocalExecutor, Registered, executor_for
from neuronbuild.orchestrate.scheduler import ProcessGroups
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from tests.conftest import neuron_recipe

UNIT = build_plan(parse_recipe(neuron_recipe())).units[0]


def test_an_unknown_executor_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(UserError) as caught:
        executor_for("slurm")
    assert str(caught.value) == "--executor 'slurm': expected one of local, ray"


def test_a_third_executor_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    row = Registered("here", "neuronbuild.orchestrate.executor:LocalExecutor")
    monkeypatch.setitem(EXECUTORS, "here", row)
    assert isinstance(executor_for("here"), LocalExecutor)
    with pytest.raises(UserError, match="--address: only --executor ray connects"):
        executor_for("here", "ray://head:10001")


def test_a_row_whose_module_cannot_be_imported_names_its_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    row = Registered("grid", "no_such_grid_module:Grid", "pip install grid", requires="Grid")
    monkeypatch.setitem(executor.EXECUTORS, "grid", row)
    with pytest.raises(UserError) as caught:
        executor_for("grid")
    assert (
        str(caught.value) == "--executor grid needs Grid, which is not installed: pip install grid"
    )


def test_a_ray_task_sends_its_retry_notices_to_the_listener_it_was_given() -> None:
    pytest.importorskip("ray")
    from neuronbuild.notices import retry_listener
    from neuronbuild.orchestrate.ray_executor import run_in_task

    heard: list[tuple[int, int, float, str]] = []

    def work(unit: CompileUnit, groups: ProcessGroups) -> str:
        notices.retrying(2, 2, 0.0, f"{unit.label()}: engine exited with 70")
        return "done"

    previous = notices.set_retry_listener(None)  # a fresh worker: nothing connected
    try:
        value, seconds = run_in_task(work, UNIT, lambda *notice: heard.append(notice))
        assert (value, heard) == ("done", [(2, 2, 0.0, f"{UNIT.label()}: engine exited with 70")])
        assert seconds >= 0
        assert retry_listener() is None  # restored once the task ended
    finally:
        notices.set_retry_listener(previous)


def test_the_driver_hands_its_own_listener_to_the_tasks() -> None:
    pytest.importorskip("ray")
    from neuronbuild.notices import retry_listener
    from neuronbuild.ui import progress

    assert retry_listener() is progress.retrying  # connected when the terminal layer loads


def test_the_build_wing_loads_nothing_of_the_terminal_layer() -> None:
    # Ray itself loads tqdm, so the wing's own modules are checked before it.
    code = (
        "import sys\n"
        "def ui(): return sorted(m for m in sys.modules if m.startswith(UI))\n"
        "UI = ('neuronbuild.ui', 'tqdm', 'click')\n"
        "import neuronbuild.orchestrate.compile, neuronbuild.orchestrate.seal, neuronbuild.orchestrate.doctor\n"
        "print(ui())\n"
        "UI = ('neuronbuild.ui', 'click')\n"
        "import neuronbuild.orchestrate.ray_executor\n"
        "print(ui())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]", "[]"]
