"""No process outlives ``compile``: killed by SIGKILL (alone, or with its whole process group, as a
job runner does), its engine processes, in sessions of their own, and the compiler processes
they started die with it; stopped by SIGTERM, it ends them and exits 143. Real processes: the
``compile`` command with the fake compiler (tests/lib/fake_compiler.py), whose ``spawn`` units
start a compiler process of their own, as vLLM-Neuron starts neuronx-cc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from neuronbuild.orchestrate import tether
from tests.conftest import REPO, neuron_recipe
from tests.lib.build_processes import MARK, killed_leaves_nothing, processes_of, wait_for
from tests.lib.claims import model_folder
from tests.orchestrate.test_liveness import BUCKETS, COMPILE_WITH_FAKE, LABELS


def start_compile(tmp_path: Path, build: str) -> subprocess.Popen[bytes]:
    """``neuronbuild compile`` of a two-unit recipe, each unit an engine that starts a compiler
    process and hangs, in a process group of its own (as a shell's job); returns once both
    engines and both compiler processes run (five processes with ``compile``)."""
    path = tmp_path / "hang.yaml"
    path.write_text(yaml.safe_dump(neuron_recipe(BUCKETS, model=str(model_folder(tmp_path)))))
    behaviour = json.dumps(dict.fromkeys(LABELS, "spawn"))
    argv = [sys.executable, "-c", COMPILE_WITH_FAKE, behaviour, "compile", str(path), "-j", "2"]
    argv += ["--cache", str(tmp_path / "store"), "--log-dir", str(tmp_path / "logs")]
    env = {**os.environ, "PYTHONPATH": str(REPO), MARK: build}
    proc = subprocess.Popen(argv, env=env, cwd=REPO, start_new_session=True)
    logs = tmp_path / "logs"

    def compilers_run() -> bool:
        started = [p for p in logs.glob("*") if "compiler process started" in p.read_text()]
        return len(started) == 2 and len(processes_of(build)) >= 5

    assert wait_for(compilers_run, 60), [p.cmdline() for p in processes_of(build)]
    return proc


@pytest.mark.parametrize("whole_group", [True, False], ids=["group", "process"])
def test_sigkill_of_compile_leaves_no_engine_or_compiler_process_behind(
    tmp_path: Path, whole_group: bool
) -> None:
    build = uuid.uuid4().hex
    killed_leaves_nothing(start_compile(tmp_path, build), build, whole_group=whole_group)


def test_sigterm_of_compile_ends_every_engine_and_compiler_process_and_exits_143(
    tmp_path: Path,
) -> None:
    build = uuid.uuid4().hex
    proc = start_compile(tmp_path, build)
    try:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 128 + signal.SIGTERM
        assert not processes_of(build), [p.cmdline() for p in processes_of(build)]
    finally:
        for left in processes_of(build):
            left.kill()


def run_tethered(argv: list[str]) -> int:
    with tether.tethered(argv) as (command, pipe):
        return subprocess.run(command, pass_fds=(pipe,), start_new_session=True).returncode


def test_the_tether_exits_as_its_engine_did() -> None:
    python = [sys.executable, "-c"]
    assert run_tethered([*python, "raise SystemExit(70)"]) == 70  # neuronx-cc's own code
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    assert run_tethered([*python, killed]) == -signal.SIGKILL  # the kernel's OOM kill, as -9
    assert run_tethered(["/nonexistent/neuronx-cc"]) == 127
