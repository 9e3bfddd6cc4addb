"""What a build tells whoever watches it, in plain fields: a unit started, a unit finished, a unit
adopted (another builder compiled it), a note.

The orchestrate wing never prints and never imports the terminal layer (the ``ui`` wing); the
command line passes an observer (``ui/progress.py``'s ``Progress`` implements this protocol) and the
build calls it. A library caller that passes none hears nothing
(:class:`Silent`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

CANCELLED = "cancelled"
"""The error a unit ends with when a signal (SIGINT, SIGTERM) stopped the build while it ran or
before it started: not a failure of the unit (an observer says ``stopped``, and the command
exits 128 + N)."""


class BuildObserver(Protocol):
    """Hears each unit's start and end while units run (from worker threads: implementations
    are thread-safe) and the run's notes; :meth:`close` ends it."""

    def started(self, key: str, label: str, phase: str | None, log: Path | None) -> None:
        """Unit ``key`` (``sha256:<hex>``, labelled ``label``, engine ``phase`` or None) runs
        from now, its engine output appended to ``log`` (None: none to read here)."""

    def finished(self, key: str, label: str, seconds: float, error: str | None) -> None:
        """Unit ``key`` ended after ``seconds`` of its own run time; ``error``: why it failed,
        None when it succeeded."""

    def adopted(self, key: str, label: str) -> None:
        """Unit ``key`` (one of the run's ``total``, never started here) ended: another builder
        compiled it and this run adopted its record."""

    def note(self, text: str) -> None:
        """One line a person should read before the units run (e.g. why fewer run at once)."""

    def close(self) -> None:
        """No unit runs any more."""


class ObserverFactory(Protocol):
    """Makes the observer of a run of ``total`` units (called once the run knows its units)."""

    def __call__(self, total: int) -> BuildObserver: ...


class Silent:
    """The observer that hears nothing: a library caller's default."""

    def started(self, key: str, label: str, phase: str | None, log: Path | None) -> None:
        pass

    def finished(self, key: str, label: str, seconds: float, error: str | None) -> None:
        pass

    def adopted(self, key: str, label: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


def silent(total: int) -> BuildObserver:
    """:class:`Silent`, as an :class:`ObserverFactory`."""
    return Silent()
