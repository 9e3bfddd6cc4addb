"""The CLI edge: run a click command and turn neuronbuild's errors into exit codes and one-line
messages (never a traceback for a user's mistake), with the taxonomy of
:mod:`neuronbuild.errors`; SIGINT, SIGTERM and SIGHUP are turned into
:class:`~neuronbuild.errors.Interrupted` so that every command cleans up and exits 128 + N, and a
standard stream that cannot be written ends the command as :func:`run` says. Under ``--json`` a
failure is also a JSON document on stdout (:func:`echo_error_json`), so that a script reading
stdout always gets one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from types import FrameType
from typing import Any

import click

from neuronbuild import notices
from neuronbuild.errors import (
    Interrupted,
    StoreError,
    catch_stop_signals,
    exit_code,
    message_lines,
)
from neuronbuild.schemas import ERROR, schema_id
from neuronbuild.ui import streams

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
    already printed its document. Neither field keeps the terminal's ``error: `` label;
    ``errors`` holds the lines as stderr shows them otherwise."""
    if not _printed_json:
        # "error: " is for a terminal; the document's fields say it already.
        errors = [line.removeprefix("error: ") for line in lines]
        echo_json(ERROR, {"error": "\n".join(errors), "errors": errors, "exit_code": code})


def wants_json(argv: Sequence[str]) -> bool:
    """Whether the command line asks for ``--json`` (before a ``--``): read from the arguments
    themselves, so that a usage error click raises before it parses ``--json`` is JSON too."""
    args = list(argv)
    return "--json" in (args[: args.index("--")] if "--" in args else args)


STOP_GRACE_SECONDS = 10.0
"""After a stop signal, how long a command may take to unwind (its ``finally`` blocks, a pool
waiting for its in-flight store calls) before it exits with 128 + N anyway. ``compile``'s units
are not cut short: the scheduler takes the signals while they run, and ends their process groups
with its own grace (:data:`neuronbuild.orchestrate.scheduler.KILL_GRACE_SECONDS`)."""

_deadline: list[threading.Timer] = []
"""The timer a stop signal started (:func:`_interrupt`); :func:`run` cancels it as it ends."""


def _interrupt(signum: int, frame: FrameType | None) -> None:
    if not _deadline:
        _deadline.append(threading.Timer(STOP_GRACE_SECONDS, _cut_short, (signum,)))
        _deadline[0].daemon = True
        _deadline[0].start()
    raise Interrupted(signum)


def _cut_short(signum: int) -> None:
    """The unwinding outlasted :data:`STOP_GRACE_SECONDS` (a thread blocked in a store call the
    signal cannot reach): say so and exit with 128 + N now. Store writes are atomic, so a cut
    one leaves only a temporary object that ``gc`` sweeps."""
    interrupted = Interrupted(signum)
    text = "".join(f"{line}\n" for line in stop_lines(interrupted))
    # Straight to the descriptor, no flush: the thread that is stuck may hold a stream's lock
    # (a full stdout pipe), and waiting on it would make this exit wait too.
    with contextlib.suppress(OSError):
        os.write(2, text.encode(errors="replace"))
    os._exit(interrupted.exit_code)


def stop_lines(exc: Interrupted) -> list[str]:
    """The line for a stop signal, the last the command prints: threads still in a store call
    announce no more retries (none of them will be waited for)."""
    notices.set_retry_listener(None)
    return message_lines(exc)


def _exit_now(code: int) -> None:
    with contextlib.suppress(streams.OutputLost, OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def say(lines: Sequence[str]) -> None:
    """Print ``lines`` on stderr; when stderr cannot take them (a full device, a closed pipe)
    they are lost, and the exit code the caller chose still wins."""
    try:
        for line in lines:
            click.echo(line, err=True)
    except streams.OutputLost:
        streams.silence("stderr")


def run(command: click.Command, argv: Sequence[str] | None = None) -> None:
    """Run ``command`` on ``argv`` (default ``sys.argv[1:]``) and exit with neuronbuild's exit
    codes; under ``--json``, a failure is printed as a ``neuronbuild.error/1`` document too.

    Every stop signal (:data:`~neuronbuild.errors.STOP_SIGNALS`) ends it with 128 + N and one
    line, whatever it was doing. A stream it cannot write ends it too: a reader that closed
    stdout's or stderr's pipe, quietly with 141 (128 + SIGPIPE, the shell's code for a command
    SIGPIPE killed); a full or failing device behind stdout, with one line and exit 3 (the
    node's condition, like a full disk); behind stderr, with exit 3 and no line.
    """
    global _printed_json
    _printed_json = False
    args = list(sys.argv[1:] if argv is None else argv)
    previous = catch_stop_signals(_interrupt)
    interrupted = False
    try:
        with streams.watched():
            code, interrupted = _outcome(command, args)
            sys.stdout.flush()
            sys.stderr.flush()
    except streams.OutputLost as lost:
        code = _output_lost(lost)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        while _deadline:
            _deadline.pop().cancel()
    if code:
        _leave(code, interrupted)


def _outcome(command: click.Command, args: list[str]) -> tuple[int, bool]:
    """Run ``command`` and print its failure; its exit code, and whether a signal ended it."""
    as_json = wants_json(args)

    def fail(lines: list[str], code: int) -> int:
        say(lines)
        if as_json:
            echo_error_json(lines, code)
        return code

    try:
        command.main(args, standalone_mode=False)
    except click.exceptions.Abort:  # click's, for an end of input at a prompt
        return fail(["aborted"], 128 + signal.SIGINT), False
    except click.ClickException as exc:  # a usage error: click's own message, then JSON
        exc.show()
        if as_json:
            echo_error_json([f"error: {exc.format_message()}"], 2)
        return 2, False
    except Interrupted as exc:
        return fail(stop_lines(exc), exc.exit_code), True
    except Exception as exc:
        code = exit_code(exc)
        if code is None:  # a fault of ours: the interpreter's traceback and exit code, but
            traceback.print_exc()  # written here, through the stream that cuts credentials out
            return 1, False
        return fail(message_lines(exc), code), False
    return 0, False


def _output_lost(lost: streams.OutputLost) -> int:
    """The exit code for a stream that cannot be written; its one line, if any, on stderr."""
    streams.silence(lost.stream)
    if lost.reader_gone:
        return 128 + signal.SIGPIPE
    if lost.stream == "stdout":
        say([f"error: {lost}"])
    return StoreError.exit_code


def _leave(code: int, interrupted: bool) -> None:
    """Exit with ``code``. After a signal, threads still blocked in a store call are not waited
    for (as in :func:`_cut_short`)."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if interrupted and any(not t.daemon for t in others):
        _exit_now(code)
    sys.exit(code)
