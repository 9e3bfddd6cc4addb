"""The CLI edge: run a click command and turn neuronbuild's errors into exit codes and one-line
messages (never a traceback for a user's mistake), with the taxonomy of
:mod:`neuronbuild.errors`; SIGTERM is turned into :class:`~neuronbuild.errors.Interrupted` so that
every command cleans up and exits 128 + 15.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

import click

from neuronbuild import envs
from neuronbuild.errors import Interrupted, exit_code, message_lines

QUIET, NORMAL, VERBOSE = -1, 0, 1
"""Verbosity levels: ``-q`` (errors and final result lines only), default, ``-v`` (more detail:
keys in full, the tail of a failed unit's log)."""

_verbosity = NORMAL
"""Set once per process by the command group's ``-v``/``-q`` (:func:`set_verbosity`); every
command reads it through the functions below, so one flag means one thing everywhere."""

SHORT_KEY = len("sha256:") + 12
"""Characters of a unit key shown without ``-v``."""

LOG_TAIL_LINES = 20
"""Lines of a failed unit's log that ``-v`` prints."""


def set_verbosity(level: int) -> None:
    """Set the verbosity (:data:`QUIET`, :data:`NORMAL` or :data:`VERBOSE`; clamped)."""
    global _verbosity
    _verbosity = max(QUIET, min(VERBOSE, level))


def verbosity() -> int:
    """The verbosity the user asked for (see :data:`QUIET`)."""
    return _verbosity


def info(message: str, err: bool = False) -> None:
    """Print a line that is neither an error nor a final result (a note, a warning, progress
    detail): dropped by ``-q``."""
    if _verbosity > QUIET:
        click.echo(message, err=err)


def detail(message: str, err: bool = False) -> None:
    """Print a line only ``-v`` asks for."""
    if _verbosity >= VERBOSE:
        click.echo(message, err=err)


def key_text(digest: str) -> str:
    """A unit key as human output shows it: its first :data:`SHORT_KEY` characters, in full
    with ``-v``."""
    return digest if _verbosity >= VERBOSE else digest[:SHORT_KEY]


def log_tail(path: str, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a log file (none when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 64 * 1024))  # the tail only: a compiler log can be large
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def use_colour(err: bool = False) -> bool:
    """Whether to colour output to stdout (``err``: stderr): only on a terminal, and never when
    ``$NO_COLOR`` is set to anything (https://no-color.org)."""
    stream = sys.stderr if err else sys.stdout
    return stream.isatty() and not envs.NO_COLOR_SET.get()


def format_table(rows: list[list[str]], indent: str = "") -> list[str]:
    """Left-aligned columns, two spaces apart, the first row being the header."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [
        (indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def run(command: click.Command) -> None:
    """Run ``command`` on ``sys.argv`` and exit with neuronbuild's exit codes."""
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        command.main(standalone_mode=False)
    except click.exceptions.Abort:  # click's SIGINT
        click.echo("aborted", err=True)
        sys.exit(128 + signal.SIGINT)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("aborted", err=True)
        sys.exit(128 + signal.SIGINT)
    except Exception as exc:
        code = exit_code(exc)
        if code is None:
            raise
        for line in message_lines(exc):
            click.echo(line, err=True)
        sys.exit(code)
