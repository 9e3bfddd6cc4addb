"""Every process of one test's build, found by a mark in its environment: a variable (``MARK``)
that the build's processes inherit, whatever session or group they run in, read from ``/proc``."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

import psutil

MARK = "NEURONBUILD_TEST_BUILD"
"""The environment variable naming one test's build: every process of it carries it."""


def processes_of(build: str) -> list[psutil.Process]:
    """The live processes (zombies left out) whose environment names ``build``."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get(MARK) == build:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def wait_for(predicate: Callable[[], object], seconds: float) -> bool:
    """Whether ``predicate()`` turns true within ``seconds`` (polled every 0.1 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def killed_leaves_nothing(
    proc: subprocess.Popen[bytes], build: str, *, whole_group: bool = False
) -> None:
    """SIGKILL ``proc`` alone, or its whole process group (as a job runner does); then no
    process of ``build`` may be left within 5 s (any left are killed after the check)."""
    try:
        if whole_group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait(10)
        assert wait_for(lambda: not processes_of(build), 5), [
            p.cmdline() for p in processes_of(build)
        ]
    finally:
        for left in processes_of(build):
            left.kill()
