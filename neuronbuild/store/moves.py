"""When a command may move a shared ref, and what it says it did (issue 20, "push can move a
shared ref backwards").

Every command that moves a ref others read (``tag``, ``push``, ``compile`` when it seals,
``seal``) moves it through :func:`move_ref`: a manifest that first reached the ref before the
value it holds now (in its history chain, :meth:`~neuronbuild.store.cas.Store.ref_chain`) is a
move backwards, refused unless the user asked for it (``--rollback``); after a rollback, moving
to the newer value again is forward; ``--expect`` makes the move a
compare-and-swap from the command line. The check runs inside the store's compare-and-swap,
against the value the swap replaces, so no writer slips in between check and move.

Mirrors (``pull``'s and ``serve``'s local tier, ``compile --local-cache``'s write-through) copy a
decision the shared store already made: they move without this check
(:meth:`~neuronbuild.store.cas.Store.set_ref`), and a node follows a rolled-back ref.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from neuronbuild.errors import RefMovesBack, RefNotExpected, UserError
from neuronbuild.store.cas import RefConflict, Store
from neuronbuild.store.records import RefMove

_DIGEST_TEXT = re.compile(r"(sha256:)?[0-9a-f]{1,64}")
"""What ``--expect`` takes besides ``none``: a manifest digest or a prefix of one."""

NEW_REF = "(new ref)"
"""What a move line shows as the previous value of a ref that did not exist."""


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()
"""``Ask.expect`` when no ``--expect`` was given (distinct from ``None``: expect no ref)."""


@dataclass(frozen=True)
class Ask:
    """What the user asked of a ref move: ``rollback`` (``--rollback``: a move back to an
    older value, :func:`older_values`, is meant), ``expect`` (``--expect``: the full digest
    the ref must hold now, None for no ref, :data:`UNSET` when not given)."""

    rollback: bool = False
    expect: str | _Unset | None = UNSET

    @property
    def expects(self) -> bool:
        """Whether ``--expect`` was given."""
        return not isinstance(self.expect, _Unset)


ASK_NOTHING = Ask()
"""No ``--rollback``, no ``--expect``: a move forward, re-read and retried when contended."""


@dataclass(frozen=True)
class Moved:
    """A ref move done: ``ref`` (``<name>/<tag>``) went from ``previous`` (None: it did not
    exist) to ``manifest`` (equal to ``previous``: nothing moved)."""

    ref: str
    previous: str | None
    manifest: str

    def line(self) -> str:
        """The move's one result line, the same in every command (digests in full)."""
        if self.previous == self.manifest:
            return f"{self.ref}: already at {self.manifest}; nothing moved"
        return f"{self.ref}: {self.previous or NEW_REF} -> {self.manifest}"


def older_values(history: list[RefMove], current: str | None) -> set[str]:
    """The manifests that are older than ``current`` in a ref's ``history`` (its chain of moves,
    oldest first, :meth:`~neuronbuild.store.cas.Store.ref_history`): those whose first arrival
    in the chain (as a move's ``previous`` or ``manifest``) comes before ``current``'s first
    arrival. So after a rollback B -> A, B is forward again and A's older values stay older.
    Every value of the chain is older when ``current`` is not in it (the ref written by hand,
    or by a version that kept no history); a manifest never in the chain is never older."""
    arrivals: list[str] = []  # each value of the chain once, in order of first arrival
    for move in history:
        for value in (move.previous, move.manifest):
            if value and value not in arrivals:
                arrivals.append(value)
    end = arrivals.index(current) if current in arrivals else len(arrivals)
    return set(arrivals[:end])


def check_move(
    ref: str, history: list[RefMove], current: str | None, target: str | None, ask: Ask
) -> None:
    """Refuse moving ``ref`` from ``current`` (None: absent) to ``target`` when ``ask`` does
    not allow it. A move to ``current`` is a no-op and always allowed; a manifest the ref never
    pointed at, or first pointed at after ``current``, is a move forward; a ``target`` not
    known yet (None: a compile before it seals) is checked against ``ask.expect`` only.

    Raises:
        RefNotExpected: ``ask.expect`` is given and is not ``current``.
        RefMovesBack: ``target`` is one of :func:`older_values` of ``history`` and
            ``ask.rollback`` is not set.
    """
    if ask.expects and ask.expect != current:
        raise RefNotExpected(
            f"--expect {ask.expect or 'none'}: {ref} holds {current or 'no manifest (no ref)'}; "
            "nothing moved (expect what it holds, or --expect none for a new ref)"
        )
    if target is None or target == current or ask.rollback:
        return
    if target in older_values(history, current):
        raise RefMovesBack(
            f"{ref} holds {current}; {target} is an older value of it (ls --history): "
            "nothing moved; pass --rollback to move it back"
        )


def expected_digest(store: Store, text: str | None) -> str | _Unset | None:
    """``Ask.expect`` for ``--expect TEXT``: :data:`UNSET` for no option, None for ``none``,
    else the full digest ``TEXT`` names in ``store`` (``sha256:<64 hex>`` or a unique prefix).

    Raises:
        UserError: not a digest, or a prefix that is unknown, ambiguous or too short.
    """
    if text is None:
        return UNSET
    if text == "none":
        return None
    if not _DIGEST_TEXT.fullmatch(text):
        raise UserError(f"--expect {text!r}: give sha256:<hex> (or a prefix of one), or none")
    try:
        return store.resolve_target(text, accept="manifest").digest
    except UserError as exc:  # unknown, ambiguous or too short: its own hint says what to give
        raise UserError(f"--expect: {exc}") from None


def precheck(store: Store, name: str, tag: str, target: str | None, ask: Ask) -> None:
    """:func:`check_move` against ``<name>/<tag>`` as it is now, before work that would be
    wasted on a refused move (a push's copy, a compile's hours): it refuses early what
    :func:`move_ref` would refuse now; :func:`move_ref` checks again when it moves.

    Raises:
        RefNotExpected, RefMovesBack: as :func:`check_move` says.
    """
    current = store.get_ref(name, tag)
    if target is None or target == current or ask.rollback:
        history: list[RefMove] = []
    else:
        history = store.ref_history(name, tag)
    check_move(f"{name}/{tag}", history, current, target, ask)


def move_ref(store: Store, name: str, tag: str, digest: str, ask: Ask) -> Moved:
    """Move the shared ref ``<name>/<tag>`` of ``store`` to ``digest`` as ``ask`` allows
    (:func:`check_move`, run inside the compare-and-swap against the value it replaces). Without
    ``ask.expect`` a concurrent move is re-read and the check run again
    (:meth:`~neuronbuild.store.cas.Store.set_ref`); with it, the one swap from the expected
    value either lands or is refused.

    Raises:
        RefNotExpected, RefMovesBack: as :func:`check_move` says (nothing moved); also
            RefNotExpected when, with ``--expect``, another writer moved the ref during the swap
            though it holds the expected value again.
        RefConflict: still contended after the retries (no ``--expect``).
        StoreError: the store failed, or ``digest`` is not one of its manifests.
    """
    ref = f"{name}/{tag}"

    def check(current: str | None) -> None:
        chain, _ = store.walk_chain(current, store.history_entries(name, tag))
        check_move(ref, [move for _, move in chain], current, digest, ask)

    policy = None if ask.rollback else check  # --expect alone is the swap's own comparison
    expect = ask.expect
    if isinstance(expect, _Unset):
        previous = store.set_ref(name, tag, digest, check=policy)
    else:
        try:
            previous = store.move_ref(name, tag, digest, expect, check=policy)
        except RefConflict:  # it held another value, or another writer moved it in between
            now = store.get_ref(name, tag)
            if now != expect:
                check_move(ref, [], now, digest, ask)  # RefNotExpected, naming what it holds
            raise RefNotExpected(  # moved away and back while we swapped
                f"--expect {expect or 'none'}: {ref} moved while moving it; nothing moved; re-run"
            ) from None
    return Moved(ref, previous, digest)
