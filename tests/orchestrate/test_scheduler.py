"""The scheduler with real subprocesses: isolation of failures, timeouts, process groups."""

from __future__ import annotations

import io
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from neuronbuild.orchestrate.events import CANCELLED
from neuronbuild.orchestrate.scheduler import ProcessGroups, UnitFailed, run_units
from neuronbuild.plan import CompileUnit, build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.ui.progress import Progress
from tests.conftest import neuron_recipe

UNITS = build_plan(parse_recipe(neuron_recipe({"num_seqs_buckets": [1, 2, 4, 8]}))).units


def test_one_failing_unit_does_not_stop_the_others(tmp_path: Path) -> None:
    failing = UNITS[1].key.digest

    def work(unit: CompileUnit, groups: ProcessGroups) -> int:
        code = 3 if unit.key.digest == failing else 0
        argv = [sys.executable, "-c", f"import sys; sys.exit({code})"]
        result = groups.run(
            argv, env=dict(os.environ), cwd=tmp_path, log=tmp_path / "log", timeout=60
        )
        if result:
            raise UnitFailed(f"exited with {result}")
        return result

    stream = io.StringIO()
    results = run_units(UNITS, work, jobs=2, observer=Progress(len(UNITS), stream))
    assert [r.ok for r in results] == [r.unit.key.digest != failing for r in results]
    assert results[1].error == "exited with 3"
    assert f"{len(UNITS)}/{len(UNITS)} finished" in stream.getvalue()
    assert "FAILED" in stream.getvalue()


def test_a_unit_a_signal_stopped_is_said_stopped_not_failed() -> None:
    """Issue 46 item 13: a cancelled unit printed ``FAILED ... (cancelled)``."""
    stream = io.StringIO()
    progress = Progress(2, stream)
    progress.finished(UNITS[0].key.digest, "prefill 1", 1.0, CANCELLED)
    progress.finished(UNITS[1].key.digest, "prefill 2", 1.0, "exited with 3")
    stopped, failed = [line for line in stream.getvalue().splitlines() if "prefill" in line]
    assert "] stopped  prefill 1 (" in stopped and "(by a signal" in stopped
    assert "FAILED" not in stopped and "0 failed" in stopped
    assert "] FAILED   prefill 2 (" in failed and failed.endswith(
        "1/2 finished, 0 running, 1 failed"
    )


@pytest.mark.slow
def test_a_timeout_ends_the_whole_process_group(tmp_path: Path) -> None:
    # The unit starts a grandchild that would outlive a plain kill of its parent.
    script = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
        "open(sys.argv[1], 'w').write(str(p.pid)); time.sleep(300)"
    )
    pid_file = tmp_path / "grandchild"

    def work(unit: CompileUnit, groups: ProcessGroups) -> None:
        groups.run(
            [sys.executable, "-c", script, str(pid_file)],
            env=dict(os.environ),
            cwd=tmp_path,
            log=tmp_path / "log",
            timeout=3,
        )

    start = time.monotonic()
    [result] = run_units(UNITS[:1], work, jobs=1, observer=Progress(1, io.StringIO()))
    assert result.error == "timed out after 3.0 s"
    assert time.monotonic() - start < 30
    grandchild = int(pid_file.read_text())
    with pytest.raises(psutil.NoSuchProcess):
        proc = psutil.Process(grandchild)
        if proc.status() == psutil.STATUS_ZOMBIE:
            raise psutil.NoSuchProcess(grandchild)


def test_an_engine_log_collects_stdout_and_stderr(tmp_path: Path) -> None:
    groups = ProcessGroups()
    log = tmp_path / "unit.log"
    code = groups.run(
        [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr)"],
        env=dict(os.environ),
        cwd=tmp_path,
        log=log,
        timeout=30,
    )
    assert code == 0
    assert log.read_text().split() == ["out", "err"]


@pytest.mark.slow
def test_a_timeout_returns_once_sigterm_ended_the_process_not_after_the_kill_grace(
    tmp_path: Path,
) -> None:
    # The engine leaves on the first SIGTERM; its unreaped exit must not look like a live group.
    groups = ProcessGroups()
    start = time.monotonic()
    with pytest.raises(UnitFailed, match=r"timed out after 1\.0 s"):
        groups.run(
            [sys.executable, "-c", "import time; time.sleep(300)"],
            env=dict(os.environ),
            cwd=tmp_path,
            log=tmp_path / "log",
            timeout=1,
        )
    assert time.monotonic() - start < 5


def test_a_timeout_is_said_as_other_durations_are(tmp_path: Path) -> None:
    with pytest.raises(UnitFailed, match=r"^timed out after 0\.3 s$"):  # not "after 0 s"
        ProcessGroups().run(
            [sys.executable, "-c", "import time; time.sleep(300)"],
            env=dict(os.environ),
            cwd=tmp_path,
            log=tmp_path / "log",
            timeout=0.3,
        )
