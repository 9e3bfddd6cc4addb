"""The CLI edge: run a click command and turn neuronbuild's errors into exit codes and one-line
messages (never a traceback for a user's mistake), with the taxonomy of
:mod:`neuronbuild.errors`; SIGTERM is turned into :class:`~neuronbuild.errors.Interrupted` so that
every command cleans up and exits 128 + 15. Under ``--json`` a failure is also a JSON document on
stdout (:func:`echo_error_json`), so that a script reading stdout always gets one.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

import click

from neuronbuild.errors import Interrupted, exit_code, message_lines
from neuronbuild.schemas import ERROR, schema_id

_printed_json = False
"""Whether this process printed its ``--json`` document: a failure after it (``verify`` finding
problems, ``compile`` with failed units) adds no second document, so stdout stays one value."""


def echo_json(shape: str, data: Mapping[str, Any]) -> None:
    """Print one ``--json`` document: ``data`` with ``"schema": "neuronbuild.<shape>/1"`` first
    (the shape's file in :mod:`neuronbuild.schemas` describes it)."""
    global _printed_json
    click.echo(json.dumps({"schema": schema_id(shape), **data}, indent=2))
    _printed_json = True


def echo_error_json(lines: Sequence[str], code: int) -> None:
    """Print a failure as ``{"schema": "neuronbuild.error/1", "error": ..., "errors": [...],
    "exit_code": N}`` on stdout (the one-line messages still go to stderr), unless the command
    already printed its document."""
    if not _printed_json:
        # "error: " is for a terminal; the document's field says it already.
        message = "\n".join(line.removeprefix("error: ") for line in lines)
        echo_json(ERROR, {"error": message, "errors": list(lines), "exit_code": code})


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for ``--json`` (before a ``--``): read from the arguments
    themselves, so that a usage error click raises before it parses ``--json`` is JSON too."""
    args = list(argv)
    return "--json" in (args[: args.index("--")] if "--" in args else args)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


def run(command: click.Command, argv: Sequence[str] | None = None) -> None:
    """Run ``command`` on ``argv`` (default ``sys.argv[1:]``) and exit with neuronbuild's exit
    codes; under ``--json``, a failure is printed as a ``neuronbuild.error/1`` document too."""
    global _printed_json
    _printed_json = False
    signal.signal(signal.SIGTERM, _interrupt)
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(args)

    def fail(lines: list[str], code: int) -> None:
        for line in lines:
            click.echo(line, err=True)
        if as_json:
            echo_error_json(lines, code)
        sys.exit(code)

    try:
        command.main(args, standalone_mode=False)
    except (click.exceptions.Abort, KeyboardInterrupt):  # click's SIGINT, or ours
        fail(["aborted"], 128 + signal.SIGINT)
    except click.ClickException as exc:  # a usage error: click's own message, then JSON
        exc.show()
        if as_json:
            echo_error_json([f"error: {exc.format_message()}"], 2)
        sys.exit(2)
    except Exception as exc:
        code = exit_code(exc)
        if code is None:
            raise
        fail(message_lines(exc), code)
