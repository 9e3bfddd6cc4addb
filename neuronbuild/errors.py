"""The one exception taxonomy of neuronbuild and its exit codes, applied once at the CLI edge.

Exit codes follow DESIGN.md: 1 some units failed (:class:`UnitsFailed`); 2 bad input
(:class:`UserError`: arguments, recipes, environment values, hostile or malformed store data);
3 store or network failure after retries (:class:`StoreError`, and an :class:`OSError` on a local
path); 128 + N on signal N (:class:`Interrupted`, one of :data:`STOP_SIGNALS`). Anything else is
a bug and keeps its traceback.
"""

from __future__ import annotations

import difflib
import errno
import json
import os
import signal
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


def show(value: Any) -> str:
    """Render a recipe value compactly for a one-line message (JSON where possible)."""
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


class UserError(Exception):
    """A mistake in what the user gave us (arguments, recipe, store data): exit code 2."""

    exit_code = 2


@dataclass(frozen=True)
class RecipeError:
    """One problem in a recipe.

    ``field`` is the dotted path of the key (``additional_config.neuron_config.num_seqs_buckets``),
    ``value`` what the recipe holds there (``MISSING`` when absent, ``NOT_A_VALUE`` when the
    problem is the key or the file itself), ``hint`` the fix.
    """

    field: str
    value: Any
    hint: str

    def __str__(self) -> str:
        if self.value is MISSING or self.value is NOT_A_VALUE:
            return f"{self.field}: {self.hint}"
        return f"{self.field}={show(self.value)}: {self.hint}"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Sentinel for a recipe key that is absent (distinct from an explicit ``null``)."""


class _NotAValue:
    def __repr__(self) -> str:
        return "NOT_A_VALUE"


NOT_A_VALUE: Any = _NotAValue()
"""Sentinel for a problem with a key or the file itself, not with a value the recipe holds (a
key given twice, a file that is not YAML): the message names no value."""


class RecipeInvalid(UserError):
    """A recipe failed validation; ``errors`` holds every problem found, in recipe order."""

    def __init__(self, source: str, errors: list[RecipeError]) -> None:
        self.source = source
        self.errors = errors
        super().__init__("\n".join(f"{source}: {e}" for e in errors))


class EnvInvalid(UserError):
    """An environment variable neuronbuild reads has a value it cannot use; the message names
    the variable: exit code 2."""


class RefMovesBack(UserError):
    """A shared ref would move to a manifest it first pointed at before the one it holds (an
    older value, :func:`~neuronbuild.store.moves.older_values`), and ``--rollback`` was not
    given (issue 20, "push can move a shared ref backwards"): exit code 2, nothing moved."""


class RefNotExpected(UserError):
    """``--expect`` named another value than the ref holds (a compare-and-swap from the command
    line that lost): exit code 2, nothing moved."""


class StoreError(Exception):
    """The store (a folder or a remote URL) failed after retries, or does not exist: exit
    code 3. ``refused``: the store refused the request outright (no permission, a read-only
    file system), so it took no effect, which a lost answer or a timeout cannot say."""

    exit_code = 3
    refused = False


NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})
"""What a local write meets on a full disk, past a quota or a file-size limit, or on a read-only
mount: never a fault of the store being read, always of the place being written."""


class NoRoom(StoreError):
    """A local write was refused for room or write access (:data:`NO_ROOM_ERRNOS`, or too little
    free space for a copy): exit code 3, as the node's own condition, retryable once space is
    freed. ``path`` is the folder that refused, ``role`` what it is to the command (``layout
    root``, ``local tier``, ``destination store``, ``temporary folder``), ``why`` the system's
    words."""

    def __init__(self, path: str, why: str, role: str = "") -> None:
        self.path, self.why, self.role = path, why, role
        where = f"{path} ({role})" if role else path
        super().__init__(
            f"{where}: {why}; free space there (or raise its quota, or mount it writable), "
            "then run the command again"
        )

    @classmethod
    def of(cls, exc: OSError, path: object, doing: str = "") -> NoRoom | None:
        """The NoRoom an OSError of a write under ``path`` means (``doing``: what was being
        written, for the message), or None for any other error."""
        if exc.errno not in NO_ROOM_ERRNOS:
            return None
        why = exc.strerror or os.strerror(exc.errno or 0)
        return cls(str(path), f"{doing}: {why}" if doing else why)

    def as_role(self, role: str) -> NoRoom:
        """The same refusal, naming the role the caller knows ``path`` has (kept if known)."""
        return self if self.role else NoRoom(self.path, self.why, role)


class StoreDataInvalid(UserError):
    """Data read from a store is malformed, hostile or incomplete: exit code 2."""


class Unsupported(UserError):
    """The store does not offer an operation a command needs (a registry answering HTTP 405
    with deletes switched off, as the distribution registry's default, GHCR and Docker Hub do;
    an immutable tag): exit code 2, since retrying cannot change it; the message names the
    setting the command's feature needs."""


class UnitsFailed(Exception):
    """Some compile units failed; the others were published and nothing was sealed: exit 1."""

    exit_code = 1


class ProbeFailed(Exception):
    """A running server does not answer as CI's did, or compiled since it started (``neuronbuild
    probe``): exit 1, so a Kubernetes probe keeps traffic away."""

    exit_code = 1


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that stop any command cleanly (:class:`Interrupted`): Ctrl-C, a service manager's
or a job runner's stop, a closed terminal."""


def catch_stop_signals(handler: Any) -> dict[int, Any]:
    """Install ``handler`` for each of :data:`STOP_SIGNALS` this process does not ignore, and
    return the handlers it replaced (to restore). An ignored one stays ignored, as Python leaves
    an ignored SIGINT: ``nohup neuronbuild compile`` outlives its terminal, a background job of
    a script is not stopped by the terminal's Ctrl-C."""
    return {
        s: signal.signal(s, handler)
        for s in STOP_SIGNALS
        if signal.getsignal(s) is not signal.SIG_IGN
    }


class Interrupted(BaseException):
    """neuronbuild received one of :data:`STOP_SIGNALS` and stopped cleanly: exit code 128 + N.

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that the signal wins over every
    ``except Exception`` it crosses (a store call's own error wrapping would otherwise report it
    as a store failure, exit 3: issue 19).
    """

    def __init__(self, signum: int) -> None:
        self.signum = signum
        self.exit_code = 128 + signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")


def exit_code(exc: BaseException) -> int | None:
    """The exit code of one of neuronbuild's errors, or None for a bug (keep its traceback)."""
    if isinstance(exc, UserError | StoreError | UnitsFailed | ProbeFailed | Interrupted):
        return int(exc.exit_code)
    if isinstance(exc, OSError):  # a local path that cannot be read or written
        return StoreError.exit_code
    return None


def message_lines(exc: BaseException) -> list[str]:
    """The one-line messages the CLI prints for ``exc`` (several for a recipe's errors), each
    without trailing whitespace (a message built from parts can end in a blank one)."""
    return [line.rstrip() for line in _message_lines(exc)]


def _message_lines(exc: BaseException) -> list[str]:
    if isinstance(exc, RecipeInvalid):
        return [f"{exc.source}: {error}" for error in exc.errors]
    if isinstance(exc, UserError):
        return [f"error: {exc}"]
    if isinstance(exc, NoRoom):  # the node's disk, not the store: no "store error"
        return [f"error: {exc}"]
    if isinstance(exc, StoreError):
        return [f"store error: {exc}"]
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return [f"error: {exc.strerror or exc}{where}"]
    return [str(exc)]


def did_you_mean(word: str, known: Iterable[str]) -> str | None:
    """The closest of ``known`` to a misspelt ``word``, or None (a hint for error messages)."""
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.75)
    return close[0] if close else None
