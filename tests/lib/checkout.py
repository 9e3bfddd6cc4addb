"""The guard that fails a test reading the checkout's ``build/`` (issue 20): that folder holds
whatever ``make run`` last trained, so a test that reads it passes or fails with the checkout.

An audit hook (:pep:`578`) sees every ``open``, ``os.listdir`` and ``os.scandir`` of this
process; :func:`watch_subprocess` installs the same hook in the Python processes tests start
(``tests/lib/checkout_guard/sitecustomize.py`` on ``PYTHONPATH``), which append what they read to
the file named by :data:`LOG_VARIABLE`. ``tests/conftest.py`` fails the test that read it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BUILD = str(REPO / "build")
GUARD_SITE = Path(__file__).resolve().parent / "checkout_guard"
LOG_VARIABLE = "NEURONBUILD_TEST_BUILD_READS"
"""The file a started process appends the paths it read under ``build/`` to, one a line."""
EVENTS = ("open", "os.listdir", "os.scandir")

reads: list[str] = []
"""Paths under ``build/`` this process read since the last :func:`take_reads`."""
_busy = False


def under_build(path: Any) -> str | None:
    """``path`` made absolute when it is the checkout's ``build/`` or under it, else None."""
    if isinstance(path, int) or path is None:
        return None
    try:
        text = os.path.abspath(os.fsdecode(path))
    except (TypeError, ValueError, OSError):
        return None
    return text if text == BUILD or text.startswith(BUILD + os.sep) else None


def _hook(event: str, args: tuple[Any, ...]) -> None:
    global _busy
    if event not in EVENTS or _busy:
        return
    found = under_build(args[0] if args else None)
    if found is None:
        return
    _busy = True
    try:
        reads.append(f"{event} {found}")
        log = os.environ.get(LOG_VARIABLE)
        if log and os.getpid() != _owner:
            with open(log, "a") as out:
                out.write(f"{event} {found} (process {os.getpid()}: {' '.join(sys.argv)})\n")
    finally:
        _busy = False


_owner = os.getpid()
_installed = False


def install(log: Path | None = None) -> None:
    """Watch this process (once) and, with ``log``, the Python processes it starts."""
    global _installed
    if log is not None:
        os.environ[LOG_VARIABLE] = str(log)
        parts = [str(GUARD_SITE), *filter(None, [os.environ.get("PYTHONPATH")])]
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def watch_subprocess() -> None:
    """The hook in a started process: every read under ``build/`` goes to the log."""
    global _owner
    if os.environ.get(LOG_VARIABLE):
        _owner = -1
        install()


def take_reads(log: Path | None) -> list[str]:
    """The reads recorded since the last call (this process's and the log's), then forgotten."""
    found = list(reads)
    reads.clear()
    if log is not None and log.exists():
        # A pytest-xdist worker is itself a started process: its own lines are in ``reads``.
        mine = f"(process {os.getpid()}:"
        found += [line for line in log.read_text().splitlines() if mine not in line]
        log.unlink()
    return found
