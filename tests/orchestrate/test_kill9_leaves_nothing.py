"""``kill -9`` of ``neuronbuild compile`` leaves no process of the build behind, whatever moment
it lands on (issue 20): an engine starting, engines compiling with compiler processes in
sessions of their own (``setsid``, as compile workers may), engines that have just exited
leaving helpers that ignore SIGTERM (in the group and out of it), and the neuron double's
engine with its engine-core helper. Each test marks its build with a variable that every
process of it inherits and scans ``/proc`` for it (:mod:`tests.lib.build_processes`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import yaml

from tests.conftest import REPO, neuron_recipe
from tests.lib.build_processes import MARK, killed_leaves_nothing, processes_of, wait_for
from tests.lib.claims import model_folder
from tests.neuron_double import SITE
from tests.orchestrate.test_liveness import BUCKETS, COMPILE_WITH_FAKE, LABELS


def started(
    tmp_path: Path, build: str, argv: list[str], env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``argv`` (a ``compile`` of a two-unit recipe) run in a session of its own, as a job runner
    starts it, every process of it marked with ``build``."""
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(neuron_recipe(BUCKETS, model=str(model_folder(tmp_path)))))
    argv = [*argv, "compile", str(path), "-j", "2", "--cache", str(tmp_path / "store")]
    argv += ["--log-dir", str(tmp_path / "logs")]
    full = {**os.environ, **env, MARK: build, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    return subprocess.Popen(argv, env=full, cwd=tmp_path, start_new_session=True)


def with_fake(tmp_path: Path, build: str, behaviour: str) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", COMPILE_WITH_FAKE, json.dumps(dict.fromkeys(LABELS, behaviour))]
    return started(tmp_path, build, argv, {"PYTHONPATH": str(REPO)})


def logs_say(tmp_path: Path, text: str, count: int) -> Callable[[], bool]:
    return lambda: sum(text in p.read_text() for p in (tmp_path / "logs").glob("*")) == count


def test_kill9_while_compilers_run_in_sessions_of_their_own_leaves_nothing(
    tmp_path: Path,
) -> None:
    build = uuid.uuid4().hex
    proc = with_fake(tmp_path, build, "session")
    ready = logs_say(tmp_path, "compiler process started", 2)
    # compile, and per unit: its tether, its engine and two setsid'd compiler processes.
    assert wait_for(lambda: ready() and len(processes_of(build)) >= 9, 60)
    outside = [p for p in processes_of(build) if os.getsid(p.pid) != os.getsid(proc.pid)]
    assert len(outside) >= 4  # really out of the engines' sessions
    killed_leaves_nothing(proc, build)


def engines_of(build: str) -> list[psutil.Process]:
    """The fake engines of ``build`` still running (their tethers left out)."""
    return [
        p
        for p in processes_of(build)
        if "fake compile" in " ".join(p.cmdline()) and "tether.py" not in " ".join(p.cmdline())
    ]


@pytest.mark.slow
def test_kill9_just_after_the_engines_exited_leaves_their_helpers_nowhere(tmp_path: Path) -> None:
    build = uuid.uuid4().hex
    proc = with_fake(tmp_path, build, "leave")
    ready = logs_say(tmp_path, "compiler process started", 2)
    # The engines exited; their helpers (SIGTERM ignored) wait out the grace before SIGKILL.
    assert wait_for(ready, 60)
    assert wait_for(lambda: not engines_of(build), 5)
    assert len(processes_of(build)) >= 5  # compile and four helpers
    killed_leaves_nothing(proc, build)


@pytest.mark.slow  # the helper in the group ignores SIGTERM: the grace runs out
def test_helpers_an_engine_leaves_end_with_its_run_even_out_of_its_group(tmp_path: Path) -> None:
    build = uuid.uuid4().hex
    proc = with_fake(tmp_path, build, "leave")
    try:
        assert proc.wait(60) == 0  # both units built; the helpers ended before compile exits
        assert not processes_of(build), [p.cmdline() for p in processes_of(build)]
    finally:
        for left in processes_of(build):
            left.kill()


def with_double(tmp_path: Path, build: str) -> subprocess.Popen[bytes]:
    env = {
        "PYTHONPATH": os.pathsep.join([str(SITE), str(REPO)]),
        "NEURONBUILD_NEURON_COMPILE_GIB": "0.5",
        "NEURON_DOUBLE_GRAPH_SECONDS": "30",
        "NEURON_DOUBLE_HELPERS": str(tmp_path / "helpers.txt"),
    }
    return started(tmp_path, build, [sys.executable, "-m", "neuronbuild"], env)


def tether_of(build: str) -> bool:
    return any("tether.py" in " ".join(p.cmdline()) for p in processes_of(build))


@pytest.mark.parametrize("moment", ["engine starting", "compiling"])
def test_kill9_of_a_neuron_compile_leaves_no_engine_or_helper(tmp_path: Path, moment: str) -> None:
    build = uuid.uuid4().hex
    proc = with_double(tmp_path, build)
    helpers = tmp_path / "helpers.txt"
    if moment == "engine starting":
        assert wait_for(lambda: tether_of(build), 60)
    else:  # an engine runs (one at a time on a small host) with vLLM's engine-core helper
        assert wait_for(lambda: helpers.exists() and helpers.read_text().split(), 60)
    killed_leaves_nothing(proc, build)
