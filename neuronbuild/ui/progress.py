"""Show long work on stderr: a live tqdm bar on a terminal, plain heartbeat lines in a log.

On a terminal the bar is redrawn twice a second, so elapsed times tick while a unit compiles (a
Neuron phase runs for an hour, and tqdm alone redraws only when a unit ends). Without one (CI
logs), carriage returns would pile up into one endless line, so plain lines are printed instead:
one per event and, for what is still running, one per
:data:`~neuronbuild.envs.HEARTBEAT_SECONDS` interval, which also keeps CI systems that kill
silent jobs from killing a compile. ``--json`` output is never touched: everything here goes to
the stream given, stderr by default.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tqdm import tqdm

from neuronbuild import envs, notices
from neuronbuild.digest import short
from neuronbuild.human import count, duration, size
from neuronbuild.orchestrate.events import CANCELLED
from neuronbuild.ui.logtail import tail_lines
from neuronbuild.ui.verbosity import QUIET, verbosity

LIVE_REFRESH_SECONDS = 0.5
"""How often a terminal's bar is redrawn while nothing else happens (twice a second: no
second of the elapsed times is skipped)."""

MAX_LINE_CHARS = 160
"""The compiler's last line is cut to this many characters in a heartbeat."""


def clock(seconds: float) -> str:
    """Elapsed time as a terminal bar shows it: ``"01:05"``, ``"1:02:03"`` (tqdm's format)."""
    return str(tqdm.format_interval(seconds))


def last_line(log: Path | None) -> str | None:
    """The last non-empty line a process wrote to ``log`` (:func:`.logtail.tail_lines`: a line
    redrawn with ``\\r`` counts, colours removed), cut to :data:`MAX_LINE_CHARS`; None
    when there is none or the file cannot be read (a unit that runs on another machine)."""
    for line in tail_lines(log, 1):
        line = line.strip()
        return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 3] + "..."
    return None


def retrying(attempt: int, attempts: int, seconds: float, reason: str) -> None:
    """Print ``retrying (attempt/attempts) in <seconds>: <reason>`` (``now`` when ``seconds`` is
    0) on stderr, above any progress bar, unless ``-q`` asked for errors and results only.
    ``attempt`` is the number of the attempt about to be made (2: the first retry). Whether and
    when to retry is the caller's policy (:mod:`neuronbuild.transports.retry` for stores). Connected
    to :mod:`neuronbuild.notices` when this module is imported, so the layers below report
    retries through it without importing this terminal layer."""
    if verbosity() <= QUIET:
        return
    when = f"in {duration(seconds)}" if seconds > 0 else "now"
    tqdm.write(f"retrying ({attempt}/{attempts}) {when}: {reason}", file=sys.stderr)


notices.set_retry_listener(retrying)


class Ticker:
    """Calls ``tick()`` every ``interval`` seconds on a daemon thread until :meth:`stop`."""

    def __init__(self, interval: float, tick: Callable[[], None]) -> None:
        self.interval, self.tick = interval, tick
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="neuronbuild-progress", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.tick()

    def stop(self) -> None:
        """Stop the ticks and wait for a tick under way to end (not when called from a tick:
        the thread cannot join itself)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


@dataclass
class _Running:
    label: str
    phase: str | None
    log: Path | None
    start: float
    next_beat: float


class Progress:
    """Compile units done/running/failed of ``total``: a bar on a terminal whose postfix names
    each running unit with its ticking elapsed time; else one line per start and end and, every
    :data:`~neuronbuild.envs.HEARTBEAT_SECONDS` (default 60 s), one heartbeat line per running
    unit naming its label, phase, elapsed time and the last line its compiler wrote to its log.

    The build's observer (:class:`neuronbuild.orchestrate.events.BuildObserver`): it prints the
    plain fields it is told, and knows nothing of the scheduler's types. A unit started without a
    log gets heartbeats without a compiler line. ``-q`` (:data:`~neuronbuild.ui.verbosity.QUIET`)
    drops the bar and the start and end lines but keeps the heartbeats in a log: ``-q`` is what
    CI jobs use, and a silent hour-long Neuron phase is what gets a CI job killed.

    Raises:
        EnvInvalid: ``$NEURONBUILD_HEARTBEAT_SECONDS`` is not a positive number (at creation).
    """

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        label: str = "compile",
    ) -> None:
        self.stream = stream or sys.stderr
        self.total = total
        self.label = label
        self.start = time.monotonic()
        self.done = self.failed = 0
        self.units: dict[str, _Running] = {}
        self.heartbeat = envs.HEARTBEAT_SECONDS.get()
        self._lock = threading.Lock()
        self.quiet = verbosity() <= QUIET  # -q: progress is detail, not a result
        self.tty = self.stream.isatty()
        self.live = self.tty and not self.quiet
        self.bar = tqdm(
            total=total, desc=label, unit="unit", file=self.stream, disable=not self.live
        )
        # A heartbeat is due heartbeat seconds after its unit started; ticks come often enough
        # that none is late by more than a quarter of the interval.
        interval = LIVE_REFRESH_SECONDS if self.live else min(self.heartbeat / 4, 1.0)
        self._ticker = Ticker(interval, self._tick)

    @property
    def running(self) -> int:
        """Units started and not yet finished."""
        return len(self.units)

    def _line(self, text: str, heartbeat: bool = False) -> None:
        if self.quiet and (self.tty or not heartbeat):
            return
        if self.live:
            self.bar.write(text, file=self.stream)
        else:
            elapsed = time.monotonic() - self.start
            print(f"[{clock(elapsed)}] {text}", file=self.stream, flush=True)

    def _update(self) -> None:
        now = time.monotonic()
        running = ", ".join(f"{r.label} {clock(now - r.start)}" for r in self.units.values())
        failed = f"{self.failed} failed; " if self.failed else ""
        self.bar.set_postfix_str(f"{failed}running: {running or '-'}", refresh=True)

    def _tick(self) -> None:
        with self._lock:
            if self.live:
                self._update()
                return
            now = time.monotonic()
            for run in self.units.values():
                if now >= run.next_beat:
                    run.next_beat += self.heartbeat
                    self._line(self._heartbeat(run, now - run.start), heartbeat=True)

    @staticmethod
    def _heartbeat(run: _Running, seconds: float) -> str:
        phase = f"{run.phase} phase, " if run.phase else ""
        line = last_line(run.log)
        said = f"; last line: {line}" if line else ""
        return f"running  {run.label}: {phase}{duration(seconds)} so far{said}"

    def started(self, key: str, label: str, phase: str | None, log: Path | None) -> None:
        """Count unit ``key`` (``sha256:<hex>``) as running from now (its heartbeats are due from
        its start, naming ``label``, ``phase`` and the last line of ``log``) and say so (a
        ``started`` line; not under ``-q``). Thread-safe."""
        with self._lock:
            now = time.monotonic()
            self.units[key] = _Running(label, phase, log, now, now + self.heartbeat)
            self._line(f"started  {label} ({short(key)})")
            if self.live:
                self._update()

    def finished(self, key: str, label: str, seconds: float, error: str | None) -> None:
        """Count unit ``key`` done (``error`` None) or failed and say so with its ``seconds`` and
        error and the counts so far (a ``done``/``FAILED`` line; not under ``-q``); a unit a
        signal stopped (``error`` :data:`~neuronbuild.orchestrate.events.CANCELLED`) is neither:
        a ``stopped`` line, counted as neither. Thread-safe."""
        with self._lock:
            self.units.pop(key, None)
            if error is None:
                self.done += 1
                status, detail = "done   ", ""
            elif error == CANCELLED:  # a signal stopped the build: not the unit's failure
                status, detail = "stopped", " (by a signal; nothing of it stored)"
            else:
                self.failed += 1
                status, detail = "FAILED ", f" ({error})"
            self._line(
                f"{status}  {label} ({short(key)}) in "
                f"{duration(seconds)}{detail}; "
                f"{self.done + self.failed}/{self.total} finished, {self.running} running, "
                f"{self.failed} failed"
            )
            self.bar.update(1)
            if self.live:
                self._update()

    def adopted(self, key: str, label: str) -> None:
        """Count unit ``key`` done, compiled by another builder, and say so with the counts so
        far (an ``adopted`` line; not under ``-q``). Thread-safe."""
        with self._lock:
            self.done += 1
            self._line(
                f"adopted  {label} ({short(key)}): another builder compiled it; "
                f"{self.done + self.failed}/{self.total} finished, {self.running} running, "
                f"{self.failed} failed"
            )
            self.bar.update(1)
            if self.live:
                self._update()

    def note(self, text: str) -> None:
        """Print ``neuronbuild: <text>`` (what a person should read before the units run),
        above the bar on a terminal; under ``-q`` too, as a warning is."""
        with self._lock:
            line = f"neuronbuild: {text}"
            if self.live:
                self.bar.write(line, file=self.stream)
            else:
                print(line, file=self.stream, flush=True)

    def close(self) -> None:
        """Stop the redraws and heartbeats and leave the bar as it is."""
        self._ticker.stop()
        with self._lock:
            self.bar.close()


class ByteProgress:
    """Bytes moved of ``total`` bytes in ``blobs`` blobs (``push``, ``pull``, ``serve``'s fetch):
    a tqdm bar with bytes, rate and ETA on a terminal; else a line when it starts, one every
    :data:`~neuronbuild.envs.HEARTBEAT_SECONDS` and one when it ends, never a carriage return.
    ``-q`` drops the bar and the start and end lines, not the periodic lines in a log (a CI job
    must not go silent).
    :meth:`advance` may be called from any thread.

    Raises:
        EnvInvalid: ``$NEURONBUILD_HEARTBEAT_SECONDS`` is not a positive number.
    """

    def __init__(self, what: str, total: int, blobs: int, stream: TextIO | None = None) -> None:
        self.what, self.total, self.blobs = what, total, blobs
        self.stream = stream or sys.stderr
        self.moved = 0
        self.start = time.monotonic()
        self._lock = threading.Lock()
        quiet = verbosity() <= QUIET  # -q: progress is detail, not a result
        tty = self.stream.isatty()
        self.live = tty and not quiet
        self.bar = tqdm(
            total=total,
            desc=what,
            unit="B",
            unit_scale=True,
            file=self.stream,
            disable=not self.live,
            dynamic_ncols=True,
        )
        self._ticker: Ticker | None = None
        self.lines = not tty  # plain lines in a log
        self.quiet = quiet
        if self.lines:
            if not quiet:
                line = f"{what}: {count(blobs, 'blob')}, {size(total)} to copy"
                print(line, file=self.stream, flush=True)
            self._ticker = Ticker(envs.HEARTBEAT_SECONDS.get(), self._report)

    def _report(self) -> None:
        with self._lock:
            moved, seconds = self.moved, time.monotonic() - self.start
        rate = moved / seconds if seconds > 0 else 0.0
        left = f", about {duration((self.total - moved) / rate)} left" if rate > 0 else ""
        percent = 100 * moved / self.total if self.total else 100.0
        print(
            f"{self.what}: {size(moved)} of {size(self.total)} ({percent:.0f}%), "
            f"{size(int(rate))}/s{left}",
            file=self.stream,
            flush=True,
        )

    def advance(self, n_bytes: int) -> None:
        """Count ``n_bytes`` more bytes moved, never past ``total``: a blob uploaded again (its
        stored size differed) reports its bytes twice, and 140% would read as a fault. A negative
        count takes bytes back (a body a registry refused, sent again), never below 0."""
        with self._lock:
            step = max(-self.moved, min(n_bytes, self.total - self.moved))
            self.moved += step
            self.bar.update(step)

    def close(self) -> None:
        """Stop the lines and leave the bar at its last state; in a log, say what was moved in
        how long (the start line's closing line; none under ``-q``)."""
        if self._ticker is not None:
            self._ticker.stop()
        with self._lock:
            self.bar.close()
            moved, seconds = self.moved, time.monotonic() - self.start
        if self.lines and not self.quiet:
            rate = f", {size(int(moved / seconds))}/s" if seconds > 0 else ""
            line = f"{self.what}: {size(moved)} of {size(self.total)} in {duration(seconds)}{rate}"
            print(line, file=self.stream, flush=True)
