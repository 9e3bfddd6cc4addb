"""How much a command prints: ``-q``, default or ``-v``, set once per process by the command
group and read by every printer, so that one flag means one thing everywhere."""

from __future__ import annotations

import click

from neuronbuild.digest import short

QUIET, NORMAL, VERBOSE = -1, 0, 1
"""Verbosity levels: ``-q`` (errors and final result lines only), default, ``-v`` (more detail:
keys in full, the tail of a failed unit's log)."""

_verbosity = NORMAL
"""Set once per process by the command group's ``-v``/``-q`` (:func:`set_verbosity`); every
command reads it through the functions below, so one flag means one thing everywhere."""


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


def echo_notes(notes: list[str]) -> None:
    """Print what a tiered store did that a user should hear about, one ``note:`` line each on
    stderr (:func:`info`: dropped by ``-q``)."""
    for note in notes:
        info(f"note: {note}", err=True)


def detail(message: str, err: bool = False) -> None:
    """Print a line only ``-v`` asks for."""
    if _verbosity >= VERBOSE:
        click.echo(message, err=err)


def key_text(digest: str) -> str:
    """A unit key or manifest digest as a human table or line shows it: its short form
    (:func:`~neuronbuild.store.names.short`, a unique prefix that commands accept back), in full
    with ``-v``. Every human output of a digest goes through here, except result lines that
    name what was just written (``sealed``, ``pushed``, ``tag``), which show it in full."""
    return digest if _verbosity >= VERBOSE else short(digest)
