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

from neuronbuild.errors import Interrupted, exit_code, message_lines


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
