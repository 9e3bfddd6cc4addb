"""What a user types for a manifest, resolved as git and docker resolve names: a ref
``<name>/<tag>``, a bare ``<name>`` (for ``<name>/latest``), a full digest ``sha256:<64 hex>``, or
a unique prefix of one (``sha256:3f2a9c1b`` or ``3f2a9c1b``, at least :data:`MIN_PREFIX_HEX` hex
digits). The short form the tool prints (:func:`~neuronbuild.digest.short`) is such a prefix.

The rules are pure functions of what a store lists (its refs, its manifest digests), so that one
store (:meth:`~neuronbuild.store.cas.Store.resolve_target`) and a tiered store resolve alike.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from neuronbuild.digest import short
from neuronbuild.errors import UserError
from neuronbuild.human import count
from neuronbuild.store.layout import LATEST, REF_PART, parse_ref

MIN_PREFIX_HEX = 8
"""Fewest hex digits a manifest prefix may have (4 billion values: a typo rarely matches)."""

LISTED_REFS = 10
"""Refs a missing-ref error names at most (nearest to what was asked first)."""

_HEX = re.compile(r"^[0-9a-f]+$")


@dataclass(frozen=True)
class Target:
    """A resolved manifest: its full ``digest``, and the ``ref`` ``(name, tag)`` it was reached
    through (None when the user named the manifest itself)."""

    digest: str
    ref: tuple[str, str] | None = None

    @property
    def ref_text(self) -> str | None:
        """The ref as typed back: ``"<name>/<tag>"``, or None when there was none."""
        return "/".join(self.ref) if self.ref else None


@dataclass(frozen=True)
class Listing:
    """How to read one store's names: ``get_ref(name, tag)`` -> digest or None, ``refs()`` ->
    every ``<name>/<tag>``, ``manifests()`` -> every manifest digest; ``where``: the store's URL,
    for messages."""

    get_ref: Callable[[str, str], str | None]
    refs: Callable[[], list[str]]
    manifests: Callable[[], list[str]]
    where: str


def missing_ref(where: str, ref: str, refs: list[str], hint: str = "") -> UserError:
    """The error for a ref the store lacks, naming the refs it has (nearest to ``ref`` first
    when there are more than :data:`LISTED_REFS`), or saying it has none."""
    hint = f"; {hint}" if hint else ""
    if not refs:
        return UserError(f"{where}: no ref {ref}; the store has no refs yet{hint}")
    ranked = sorted(refs)
    if len(ranked) > LISTED_REFS:  # the same name first (a tag mistyped), then similar names
        name, _, tag = ref.partition("/")

        def distance(other: str) -> tuple[float, float]:
            other_name, _, other_tag = other.partition("/")
            return (
                -difflib.SequenceMatcher(None, name, other_name).ratio(),
                -difflib.SequenceMatcher(None, tag, other_tag).ratio(),
            )

        ranked.sort(key=distance)
    shown = ", ".join(ranked[:LISTED_REFS])
    left = len(ranked) - LISTED_REFS
    more = f" and {left} more (neuronbuild ls)" if left > 0 else ""
    return UserError(f"{where}: no ref {ref}; refs there: {shown}{more}{hint}")


def _by_prefix(listing: Listing, hexprefix: str, typed: str) -> list[str]:
    if len(hexprefix) == 64:
        return ["sha256:" + hexprefix]  # a full digest names itself; reading it checks presence
    if len(hexprefix) < MIN_PREFIX_HEX:
        raise UserError(
            f"{typed}: a manifest prefix needs at least {MIN_PREFIX_HEX} hex digits "
            f"(e.g. sha256:{'0' * MIN_PREFIX_HEX}); give more"
        )
    return sorted(d for d in listing.manifests() if d.removeprefix("sha256:").startswith(hexprefix))


def _one(matches: list[str], typed: str, where: str) -> str:
    if len(matches) > 1:
        shown = ", ".join(short(d) for d in matches[:5])
        raise UserError(
            f"{typed} is ambiguous in {where}: it starts {count(len(matches), 'manifest')} "
            f"({shown}); "
            "give more hex digits"
        )
    if not matches:
        raise UserError(f"{where}: no manifest starts with {typed} (neuronbuild ls lists them)")
    return matches[0]


def resolve_manifest(listing: Listing, text: str) -> Target:
    """A manifest named by digest or unique prefix, with or without ``sha256:``.

    Raises:
        UserError: not hex, too short, unknown or ambiguous (one line each).
    """
    hexprefix = text.removeprefix("sha256:")
    if not _HEX.match(hexprefix) or len(hexprefix) > 64:
        raise UserError(f"{text!r}: expected a manifest digest sha256:<hex> or a prefix of one")
    return Target(_one(_by_prefix(listing, hexprefix, text), text, listing.where))


def resolve_ref(listing: Listing, text: str, hint: str = "") -> Target:
    """The manifest a ref points at; a bare name means ``<name>/latest``.

    Raises:
        UserError: a malformed ref, or one the store lacks (naming the refs it has).
    """
    name, tag = parse_ref(text)
    digest = listing.get_ref(name, tag)
    if digest is None:
        raise missing_ref(listing.where, f"{name}/{tag}", listing.refs(), hint)
    return Target(digest, (name, tag))


Accept = Literal["any", "ref", "manifest"]
"""What a caller takes: ``"any"`` a ref, a bare name, a digest or a prefix; ``"ref"`` refs and bare
names only; ``"manifest"`` digests and prefixes only."""


def resolve(listing: Listing, text: str, accept: Accept = "any", hint: str = "") -> Target:
    """The manifest ``text`` names, read as ``accept`` says (:data:`Accept`); ``hint``: what to
    do when a ref is missing (appended to that error).

    Raises:
        UserError: nothing matches (the refs that exist are named), a prefix is ambiguous or
            too short, or the text is neither a ref nor a digest.
        ValueError: ``accept`` is none of :data:`Accept` (a caller's typo, not a user's).
    """
    if accept == "ref":
        return resolve_ref(listing, text, hint)
    if accept == "manifest":
        return resolve_manifest(listing, text)
    if accept == "any":
        return resolve_target(listing, text, hint)
    raise ValueError(f"accept={accept!r}: expected one of {get_args(Accept)}")


def resolve_target(listing: Listing, text: str, hint: str = "") -> Target:
    """A ref, a bare name or a manifest digest or prefix (see the module docstring).

    A bare word that is both a name with a ``latest`` ref and a manifest prefix is refused as
    ambiguous, rather than guessed: serving the wrong build is worse than asking.

    Raises:
        UserError: nothing or more than one thing matches (one line, naming what exists).
    """
    if text.startswith("sha256:"):
        return resolve_manifest(listing, text)
    if "/" in text or not _HEX.match(text) or len(text) < MIN_PREFIX_HEX:
        return resolve_ref(listing, text, hint)
    by_ref = listing.get_ref(text, LATEST) if REF_PART.match(text) else None
    matches = _by_prefix(listing, text, text)
    if by_ref is not None and matches:
        raise UserError(
            f"{text!r} is both the ref {text}/{LATEST} and a prefix of manifest "
            f"{short(matches[0])}; write {text}/{LATEST} or sha256:{text}"
        )
    if by_ref is not None:
        return Target(by_ref, (text, LATEST))
    if matches:
        return Target(_one(matches, text, listing.where))
    either = f"no manifest starts with {text} either" + (f"; {hint}" if hint else "")
    raise missing_ref(listing.where, f"{text}/{LATEST}", listing.refs(), either)
