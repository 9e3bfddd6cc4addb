"""What a failed engine run retries and what a failure blocks (issue 19): ``run_unit`` retries a
transient failure once after its pause and a run killed for memory twice with less parallelism,
nothing else; each run's failure is read from that run's part of the log; a cancel ends the
retries. ``run_units`` keeps one unit's failure (of any exception type) to that unit and returns
results in the units' order. The engine is a scripted double here (no process is started), so
a wrong count or the wrong failure retried shows as the number of runs."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuronbuild import notices
from neuronbuild.engines.compiler import EngineCommand, Failure
from neuronbuild.orchestrate import compile as build
from neuronbuild.orchestrate.events import Silent
from neuronbuild.orchestrate.scheduler import ProcessGroups, UnitFailed, end_group, run_units
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from tests.conftest import neuron_recipe

RECIPE = parse_recipe(neuron_recipe())
PREFILL = build_plan(RECIPE).units[0]

FAILURES = {
    70: Failure("neuronx-cc exit 70", "backoff"),
    137: Failure("killed for memory", "fewer_workers"),
    1: Failure("NCC_INLA001 in the compiler", "none", code="NCC_INLA001", bucket="nbt 4096"),
}


class ScriptedEngine:
    """A compiler whose runs exit with ``codes`` in turn; each run logs ``run N``. Records the
    ``pressure`` of each command and the log text each failure was classified from."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = codes
        self.pressures: list[int] = []
        self.classified: list[str] = []
        self.cancelled = threading.Event()

    def command(
        self, recipe: Any, unit: Any, cache_root: Path, *, pressure: int = 0, timeout: Any = None
    ) -> EngineCommand:
        self.pressures.append(pressure)
        return EngineCommand(["engine"], {}, cache_root)

    def run(self, argv: list[str], *, env: Any, cwd: Path, log: Path, timeout: Any) -> int:
        with open(log, "a") as f:
            f.write(f"run {len(self.pressures)}\n")
        return self.codes[len(self.pressures) - 1]

    def classify(self, code: int, text: str) -> Failure:
        self.classified.append(text)
        return FAILURES[code]


@pytest.fixture(autouse=True)
def no_pause(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int, float]]]:
    monkeypatch.setattr(build, "RETRY_BACKOFF_SECONDS", 0.0)
    heard: list[tuple[int, int, float]] = []
    previous = notices.set_retry_listener(lambda a, n, s, r: heard.append((a, n, s)))
    yield heard
    notices.set_retry_listener(previous)


def run(engine: ScriptedEngine, tmp_path: Path) -> None:
    build.run_unit(engine, engine, RECIPE, PREFILL, tmp_path, tmp_path / "log", None)  # type: ignore[arg-type]


def test_a_transient_failure_is_run_again_once(
    tmp_path: Path, no_pause: list[tuple[int, int, float]]
) -> None:
    engine = ScriptedEngine([70, 0])
    run(engine, tmp_path)
    assert engine.pressures == [0, 0]
    assert no_pause == [(2, 2, 0.0)]
    engine = ScriptedEngine([70, 70, 0])
    with pytest.raises(UnitFailed, match="neuronx-cc exit 70"):
        run(engine, tmp_path)
    assert len(engine.pressures) == 2


def test_a_run_killed_for_memory_is_run_twice_more_each_with_less_parallelism(
    tmp_path: Path, no_pause: list[tuple[int, int, float]]
) -> None:
    engine = ScriptedEngine([137, 137, 0])
    run(engine, tmp_path)
    assert engine.pressures == [0, 1, 2]
    assert no_pause == [(2, 3, 0.0), (3, 3, 0.0)]
    engine = ScriptedEngine([137, 137, 137, 0])
    with pytest.raises(UnitFailed, match="killed for memory"):
        run(engine, tmp_path)
    assert engine.pressures == [0, 1, 2]


def test_transient_and_memory_retries_are_counted_apart(tmp_path: Path) -> None:
    engine = ScriptedEngine([137, 70, 137, 0])
    run(engine, tmp_path)
    assert engine.pressures == [0, 1, 1, 2]


def test_a_failure_that_is_not_retryable_fails_at_once_naming_phase_bucket_and_log(
    tmp_path: Path, no_pause: list[tuple[int, int, float]]
) -> None:
    engine = ScriptedEngine([1, 0])
    with pytest.raises(UnitFailed) as info:
        run(engine, tmp_path)
    assert len(engine.pressures) == 1 and no_pause == []
    assert str(info.value) == "prefill phase failed at nbt 4096: NCC_INLA001 in the compiler"
    failure = info.value.failure
    assert failure is not None
    assert (failure.phase, failure.bucket, failure.code) == ("prefill", "nbt 4096", "NCC_INLA001")
    assert failure.log == str(tmp_path / "log")


def test_each_failure_is_read_from_its_own_run_of_the_log(tmp_path: Path) -> None:
    (tmp_path / "log").write_text("an earlier compile's output\n")
    engine = ScriptedEngine([137, 70, 0])
    run(engine, tmp_path)
    assert engine.classified[0] == "run 1\n"
    assert engine.classified[1].strip().endswith("run 2")
    assert "run 1" not in engine.classified[1] and "earlier" not in engine.classified[0]
    assert "running the unit again" in (tmp_path / "log").read_text()


def test_a_cancel_during_the_pause_ends_the_retries(tmp_path: Path) -> None:
    engine = ScriptedEngine([70, 0])
    engine.cancelled.set()
    with pytest.raises(UnitFailed, match="cancelled"):
        run(engine, tmp_path)
    assert len(engine.pressures) == 1


UNITS = build_plan(parse_recipe(neuron_recipe({"num_seqs_buckets": [1, 2, 4, 8]}))).units


def test_any_exception_fails_only_its_unit_and_results_keep_the_units_order() -> None:
    first, second = UNITS
    second_done = threading.Event()

    def work(unit: Any, groups: ProcessGroups) -> str:
        if unit is first:
            assert second_done.wait(5), "the units ran one after another"
            raise KeyError()
        second_done.set()
        return "published"

    results = run_units(UNITS, work, jobs=2, observer=Silent())
    assert [r.unit for r in results] == [first, second]
    assert [r.ok for r in results] == [False, True]
    assert results[0].error == "KeyError" and results[1].value == "published"


def test_no_jobs_asked_still_runs_every_unit_one_at_a_time() -> None:
    ran: list[Any] = []
    results = run_units(UNITS, lambda unit, groups: ran.append(unit), jobs=0, observer=Silent())
    assert ran == list(UNITS) and all(r.ok for r in results)


def test_a_cancelled_group_starts_no_process(tmp_path: Path) -> None:
    groups = ProcessGroups()
    groups.end_all()
    marker = tmp_path / "started"
    with pytest.raises(UnitFailed, match="cancelled"):
        groups.run(["touch", str(marker)], env={}, cwd=tmp_path, log=tmp_path / "log", timeout=5)
    assert not marker.exists()


class Recording(Silent):
    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []

    def started(self, key: str, label: str, phase: str | None, log: Path | None) -> None:
        self.events.append(("started", key, label, phase, log))

    def finished(self, key: str, label: str, seconds: float, error: str | None) -> None:
        self.events.append(("finished", key, label, error))


def test_the_observer_hears_each_unit_with_its_label_phase_and_log_and_seconds_are_its_own(
    tmp_path: Path,
) -> None:
    unit = UNITS[0]
    observer = Recording()
    logs = {unit.key.digest: tmp_path / "prefill.log"}
    [result] = run_units([unit], lambda u, g: None, jobs=1, observer=observer, logs=logs)
    assert observer.events == [
        ("started", unit.key.digest, unit.label(), "prefill", tmp_path / "prefill.log"),
        ("finished", unit.key.digest, unit.label(), None),
    ]
    [failed] = run_units([unit], lambda u, g: 1 / 0, jobs=1, observer=Silent())
    [refused] = run_units(
        [unit], lambda u, g: (_ for _ in ()).throw(UnitFailed("x")), jobs=1, observer=Silent()
    )
    assert all(0 <= r.seconds < 60 for r in (result, failed, refused))


def test_one_job_runs_one_unit_at_a_time() -> None:
    running: list[int] = []
    most = [0]
    lock = threading.Lock()

    def work(unit: Any, groups: ProcessGroups) -> None:
        with lock:
            running.append(1)
            most[0] = max(most[0], len(running))
        threading.Event().wait(0.05)
        with lock:
            running.pop()

    run_units(UNITS, work, jobs=1, observer=Silent())
    assert most[0] == 1


def test_an_engine_process_runs_in_the_given_folder_with_exactly_the_given_environment(
    tmp_path: Path,
) -> None:
    script = "import os; print(os.getcwd(), sorted(k for k in os.environ if k.startswith('NB_')))"
    (tmp_path / "work").mkdir()
    code = ProcessGroups().run(
        [sys.executable, "-c", script],
        env={"NB_ONLY": "1", "PATH": "/usr/bin:/bin"},
        cwd=tmp_path / "work",
        log=tmp_path / "log",
        timeout=30,
    )
    assert code == 0
    assert (tmp_path / "log").read_text().strip() == f"{tmp_path / 'work'} ['NB_ONLY']"


def test_ending_a_group_gives_it_the_grace_period_to_exit_on_sigterm(tmp_path: Path) -> None:
    script = (
        "import signal, sys, time\n"
        "def bye(*a):\n"
        "    time.sleep(0.3); print('cleaned up', flush=True); sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    with open(tmp_path / "log", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=out, start_new_session=True)
        while "ready" not in (tmp_path / "log").read_text():
            threading.Event().wait(0.02)
        end_group(proc.pid, grace=10, reap=proc.poll)
    assert "cleaned up" in (tmp_path / "log").read_text()
    assert proc.poll() == 0
