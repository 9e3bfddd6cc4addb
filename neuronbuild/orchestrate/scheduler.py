"""Run compile units in parallel worker processes, with timeouts, reports and clean cancellation.

Each unit's engine runs as a subprocess in its own process group (vLLM starts helper processes of
its own), so a timeout or a SIGINT/SIGTERM of neuronbuild ends the whole group: first SIGTERM, then
SIGKILL after a grace period; its leader is a tether (:mod:`.tether`) that ends the group when
neuronbuild dies, even by SIGKILL. One failing unit never stops the others.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from neuronbuild.errors import Interrupted, catch_stop_signals
from neuronbuild.graph import CompileUnit
from neuronbuild.human import duration
from neuronbuild.orchestrate.events import CANCELLED, BuildObserver
from neuronbuild.orchestrate.report import UnitFailure
from neuronbuild.orchestrate.tether import tethered

KILL_GRACE_SECONDS = 10.0
"""Seconds between SIGTERM and SIGKILL when ending an engine's process group."""


class UnitFailed(Exception):
    """A unit's compile failed; the message says why. ``failure``: what the engine read from its
    log (phase, bucket, code, log path), for the summary; None when nothing is known."""

    def __init__(self, message: str, failure: UnitFailure | None = None) -> None:
        super().__init__(message)
        self.failure = failure


@dataclass(frozen=True)
class UnitResult:
    """The outcome of one unit: ``value`` (the worker's return) on success, else ``error`` and
    the ``failure`` its :class:`UnitFailed` carried. ``seconds``: the unit's own run time.
    ``held``: not run, because its :data:`Claim` found another builder on it."""

    unit: CompileUnit
    seconds: float
    value: Any = None
    error: str | None = None
    failure: UnitFailure | None = None
    held: bool = False

    @property
    def ok(self) -> bool:
        """The unit ran and succeeded."""
        return self.error is None and not self.held


class Held(Protocol):
    """What a claimed unit holds while it runs (a lease); released when it ends."""

    def release(self) -> None:
        """Give it up (the unit ended, however)."""


Claim = Callable[[CompileUnit], Held | None]
"""Asked just before a unit starts: what it holds while it runs, or None when another builder is
on it (the unit does not run; its result is ``held``). A claim that raises fails its unit."""


class _Unclaimed:
    def release(self) -> None:
        pass


def unit_started(observer: BuildObserver, unit: CompileUnit, log: Path | None) -> None:
    """Tell ``observer`` that ``unit`` starts, its engine output going to ``log``."""
    observer.started(unit.key.digest, unit.label(), unit.phase, log)


def unit_finished(observer: BuildObserver, result: UnitResult) -> None:
    """Tell ``observer`` how ``result``'s unit ended."""
    observer.finished(result.unit.key.digest, result.unit.label(), result.seconds, result.error)


class ProcessGroups:
    """The engine process groups currently running, so they can all be ended at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[int, subprocess.Popen[bytes]] = {}
        self.cancelled = threading.Event()

    def run(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cwd: Path,
        log: Path,
        timeout: float | None,
    ) -> int:
        """Run ``argv`` in a new process group with stdout and stderr appended to ``log``.

        Returns its exit code. Raises UnitFailed on timeout (seconds) or cancellation, after the
        whole group has been ended.
        """
        if self.cancelled.is_set():
            raise UnitFailed(CANCELLED)
        with open(log, "ab") as out, tethered(argv) as (command, pipe):
            proc = subprocess.Popen(
                command,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                pass_fds=(pipe,),
            )
            with self._lock:
                self._groups[proc.pid] = proc
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired as expired:
                end_group(proc.pid, reap=proc.poll)
                proc.wait()
                raise UnitFailed(f"timed out after {duration(expired.timeout)}") from None
            finally:
                with self._lock:
                    self._groups.pop(proc.pid, None)
                # Helpers the engine left behind (vLLM-Neuron's engine processes do not exit
                # after a compile) end with the run.
                end_group(proc.pid, reap=proc.poll)
            if self.cancelled.is_set():
                raise UnitFailed(CANCELLED)
            return code

    def end_all(self) -> None:
        """Cancel: no new process starts, and every running group is ended."""
        self.cancelled.set()
        with self._lock:
            groups = list(self._groups.items())
        threads = [
            threading.Thread(target=end_group, args=(pgid,), kwargs={"reap": proc.poll})
            for pgid, proc in groups
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def end_group(
    pgid: int, grace: float = KILL_GRACE_SECONDS, reap: Callable[[], object] | None = None
) -> None:
    """SIGTERM process group ``pgid``, then SIGKILL whatever is left after ``grace`` seconds.

    Returns as soon as the group is empty. ``reap`` (the leader's ``Popen.poll``) collects the
    leader once it exits: an unreaped leader stays a zombie member of its group, so without it
    the group would look alive for the whole grace period.
    """
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if reap is not None:
            reap()
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def signals_cancel(groups: ProcessGroups) -> Iterator[list[int]]:
    """While active, a stop signal (SIGINT, SIGTERM, SIGHUP) ends every running engine group;
    the received signal numbers are collected in the yielded list (the caller raises
    :class:`Interrupted`)."""
    received: list[int] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        threading.Thread(target=groups.end_all, daemon=True).start()

    previous = catch_stop_signals(handler)
    try:
        yield received
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def run_units(
    units: Sequence[CompileUnit],
    work: Callable[[CompileUnit, ProcessGroups], Any],
    jobs: int,
    observer: BuildObserver,
    logs: Mapping[str, Path] | None = None,
    claim: Claim | None = None,
) -> list[UnitResult]:
    """Run ``work(unit, groups)`` for every unit on up to ``jobs`` threads, telling ``observer``
    as each starts (with its log from ``logs``, by unit key) and ends; ``claim`` is asked first
    on the unit's thread (a unit it does not give is left, ``held``, and the thread takes the
    next).

    ``work`` starts its engine processes through ``groups`` and raises UnitFailed (or any
    exception) to fail its unit. Returns one result per unit, in the order of ``units``.

    Raises:
        Interrupted: SIGINT or SIGTERM arrived; every engine group was ended and the workers
            have stopped.
    """
    groups = ProcessGroups()

    def one(unit: CompileUnit) -> UnitResult:
        start = time.monotonic()
        held: Held | None = _Unclaimed()
        try:
            held = claim(unit) if claim is not None and not groups.cancelled.is_set() else held
            if held is None:
                return UnitResult(unit, 0.0, held=True)
            unit_started(observer, unit, (logs or {}).get(unit.key.digest))
            value = work(unit, groups)
            result = UnitResult(unit, time.monotonic() - start, value=value)
        except UnitFailed as exc:
            result = UnitResult(unit, time.monotonic() - start, error=str(exc), failure=exc.failure)
        except Exception as exc:  # a failing unit must not stop the others
            result = UnitResult(
                unit, time.monotonic() - start, error=str(exc) or type(exc).__name__
            )
        finally:
            if held is not None:
                held.release()
        unit_finished(observer, result)
        return result

    with signals_cancel(groups) as received, ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(one, unit) for unit in units]
        while not all(f.done() for f in futures):
            if received:
                groups.end_all()
                for f in futures:
                    f.cancel()
            time.sleep(0.1)
        if received:
            groups.end_all()
            raise Interrupted(received[0])
        return [f.result() for f in futures]
