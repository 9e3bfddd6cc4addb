"""Pins (issue 46 item 18) of the claims the scheduler's process groups and the tether carry, each
with a fast test that fails when its check is removed or inverted: an engine runs in a session
of its own; ending a group SIGKILLs what outlives the grace and returns as soon as the group is
empty (its leader reaped); what an engine leaves in its group ends with the run, and a timeout
ends helpers that left the group too; a run a cancel ended says cancelled, whatever its exit
code; a cancelled scheduler asks no more claims, and every claim is released however its unit
ended. The tether ends what the engine left (out of its group, orphaned) when the engine exits,
and its engine dies with it when the tether alone is killed. Real processes, each under a
second on the unbroken product."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psutil
import pytest

from neuronbuild.orchestrate import scheduler, tether
from neuronbuild.orchestrate.events import CANCELLED, Silent
from neuronbuild.orchestrate.scheduler import ProcessGroups, UnitFailed, end_group, run_units
from neuronbuild.plan import CompileUnit, build_plan
from neuronbuild.recipe import parse_recipe
from tests.conftest import neuron_recipe
from tests.lib.build_processes import wait_for

UNITS = build_plan(parse_recipe(neuron_recipe({"num_seqs_buckets": [1, 2, 4, 8]}))).units

STAY = "import time; time.sleep(30)"
"""A helper process that runs on (30 s at most, should a broken product leave it)."""


def spawns(pid_file: Path, then: str, *, own_session: bool) -> list[str]:
    """An engine that starts a helper (in a session of its own, or in its group), writes the
    helper's pid to ``pid_file``, then runs ``then``."""
    script = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {STAY!r}], start_new_session={own_session})\n"
        "open(sys.argv[1] + '.tmp', 'w').write(str(p.pid))\n"
        "import os; os.replace(sys.argv[1] + '.tmp', sys.argv[1])\n"
        f"{then}\n"
    )
    return [sys.executable, "-c", script, str(pid_file)]


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie is gone)."""
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def cleanup(pid_files: Sequence[Path]) -> Iterator[None]:
    """Kill whatever pid the files name once the test is over (a broken product leaves them)."""
    try:
        yield
    finally:
        for path in pid_files:
            if path.exists():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(path.read_text()), signal.SIGKILL)


def run(groups: ProcessGroups, argv: list[str], tmp_path: Path, timeout: float | None) -> int:
    return groups.run(
        argv, env=dict(os.environ), cwd=tmp_path, log=tmp_path / "log", timeout=timeout
    )


# Running a group.


def test_an_engine_runs_in_a_session_and_process_group_of_its_own(tmp_path: Path) -> None:
    script = "import os; print(os.getsid(0), os.getpgrp())"
    assert run(ProcessGroups(), [sys.executable, "-c", script], tmp_path, 30) == 0
    sid, pgrp = map(int, (tmp_path / "log").read_text().split())
    assert sid != os.getsid(0) and pgrp != os.getpgrp()


@pytest.mark.slow  # over 1 s: the grace of an ended group, PID 1's reaping
def test_a_helper_an_engine_leaves_in_its_group_ends_with_the_run_without_the_tether(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scheduler's own end of the group after the run, not the tether's (taken away here).
    @contextlib.contextmanager
    def untethered(argv: Sequence[str]) -> Iterator[tuple[list[str], int]]:
        read_end, write_end = os.pipe()
        try:
            yield list(argv), read_end
        finally:
            os.close(read_end)
            os.close(write_end)

    monkeypatch.setattr(scheduler, "tethered", untethered)
    pid_file = tmp_path / "helper"
    with cleanup([pid_file]):
        assert run(ProcessGroups(), spawns(pid_file, "", own_session=False), tmp_path, 30) == 0
        helper = int(pid_file.read_text())
        assert wait_for(lambda: not alive(helper), 1)


@pytest.mark.slow  # over 1 s: the grace of an ended group, PID 1's reaping
def test_a_timeout_ends_a_helper_that_left_the_engines_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "helper"
    argv = spawns(pid_file, "import time; time.sleep(30)", own_session=True)
    with cleanup([pid_file]):
        with pytest.raises(UnitFailed, match="timed out"):
            run(ProcessGroups(), argv, tmp_path, 1.0)
        assert wait_for(lambda: not alive(int(pid_file.read_text())), 2)


def test_a_run_a_cancel_ended_says_cancelled_not_its_exit_code(tmp_path: Path) -> None:
    groups = ProcessGroups()

    def cancel_once_running() -> None:
        if wait_for(lambda: groups._groups, 10):
            groups.end_all()

    threading.Thread(target=cancel_once_running, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(UnitFailed, match=f"^{CANCELLED}$"):
        run(groups, [sys.executable, "-c", STAY], tmp_path, 30)
    assert time.monotonic() - start < 5


# Ending a group.


def ready_group(tmp_path: Path, script: str) -> subprocess.Popen[bytes]:
    """A process leading a group of its own, once it printed ``ready`` (its handlers set)."""
    log = tmp_path / "group.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=out, start_new_session=True)
    assert wait_for(lambda: "ready" in log.read_text(), 10)
    return proc


def test_ending_a_group_sigkills_what_outlives_the_grace(tmp_path: Path) -> None:
    proc = ready_group(
        tmp_path,
        "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\ntime.sleep(30)\n",
    )
    try:
        end_group(proc.pid, grace=0.2, reap=proc.poll)
        assert proc.wait(timeout=2) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()


def test_ending_a_group_returns_once_its_reaped_leader_left_on_sigterm(tmp_path: Path) -> None:
    # Not after the grace: neither while the group is empty nor while its leader is a zombie.
    proc = ready_group(tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(30)\n")
    try:
        start = time.monotonic()
        end_group(proc.pid, grace=3.0, reap=proc.poll)
        assert time.monotonic() - start < 1.5
        assert proc.returncode == -signal.SIGTERM
    finally:
        proc.kill()
        proc.wait()


# Claims.


class Recorded:
    def __init__(self, unit: CompileUnit, released: list[CompileUnit]) -> None:
        self.unit, self.released = unit, released

    def release(self) -> None:
        self.released.append(self.unit)


def test_every_claim_is_released_however_its_unit_ended() -> None:
    released: list[CompileUnit] = []
    ends: list[BaseException | None] = [None, UnitFailed("exited with 3"), RuntimeError("broke")]

    def work(unit: CompileUnit, groups: ProcessGroups) -> None:
        end = ends.pop(0)
        if end is not None:
            raise end

    units = [UNITS[0], UNITS[1], UNITS[0]]
    results = run_units(
        units, work, jobs=1, observer=Silent(), claim=lambda u: Recorded(u, released)
    )
    assert [r.ok for r in results] == [True, False, False]
    assert released == units


def test_a_cancelled_scheduler_asks_no_more_claims() -> None:
    asked: list[CompileUnit] = []

    def claim(unit: CompileUnit) -> Any:
        asked.append(unit)
        return Recorded(unit, [])

    def work(unit: CompileUnit, groups: ProcessGroups) -> None:
        groups.end_all()  # as a stop signal does

    run_units(UNITS, work, jobs=1, observer=Silent(), claim=claim)
    assert asked == [UNITS[0]]


# The tether.


def test_the_tether_ends_an_orphaned_helper_out_of_its_group_when_the_engine_exits(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "helper"
    with (
        cleanup([pid_file]),
        tether.tethered(spawns(pid_file, "", own_session=True)) as (
            command,
            pipe,
        ),
    ):
        done = subprocess.run(command, pass_fds=(pipe,), start_new_session=True, timeout=20)
        assert done.returncode == 0
        assert wait_for(lambda: not alive(int(pid_file.read_text())), 1)


def test_an_engine_dies_with_its_tether_killed_alone(tmp_path: Path) -> None:
    pid_file = tmp_path / "engine"
    script = f"import os, sys\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n{STAY}\n"
    with (
        cleanup([pid_file]),
        tether.tethered([sys.executable, "-c", script, str(pid_file)]) as (
            command,
            pipe,
        ),
    ):
        proc = subprocess.Popen(command, pass_fds=(pipe,), start_new_session=True)
        try:
            assert wait_for(lambda: pid_file.exists() and pid_file.read_text(), 10)
            os.kill(proc.pid, signal.SIGKILL)  # the tether only, not its group
            proc.wait()
            assert wait_for(lambda: not alive(int(pid_file.read_text())), 2)
        finally:
            proc.kill()
            proc.wait()


def test_a_tether_whose_builder_is_gone_ends_its_engine_and_itself_by_sigkill(
    tmp_path: Path,
) -> None:
    pid_file = tmp_path / "engine"
    script = f"import os, sys\nopen(sys.argv[1], 'w').write(str(os.getpid()))\n{STAY}\n"
    with cleanup([pid_file]):
        with tether.tethered([sys.executable, "-c", script, str(pid_file)]) as (command, pipe):
            proc = subprocess.Popen(command, pass_fds=(pipe,), start_new_session=True)
            assert wait_for(lambda: pid_file.exists() and pid_file.read_text(), 10)
        # The pipe's write end closed, as when neuronbuild dies.
        assert proc.wait(timeout=5) == -signal.SIGKILL
        assert wait_for(lambda: not alive(int(pid_file.read_text())), 2)
