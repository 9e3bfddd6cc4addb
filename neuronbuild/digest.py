"""Digests: canonical JSON, sha256 of bytes, streams and files, and the one verifying reader.

Every digest carries its algorithm (``sha256:<64 hex>``, as in Bazel's remote execution API); the
hex alone (:func:`hex_of`) names objects in store paths. Small records are accepted only in their
canonical bytes (:func:`parse_canonical`), so one object has one spelling and every command reads
it the same way. Blob bytes reach a reader only through :func:`copy_verified`, which checks the
digest as it streams, as bazel-remote's verifying reader does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from neuronbuild.errors import StoreDataInvalid

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
CHUNK = 1 << 20
"""Bytes per read while hashing or copying (1 MiB)."""


def canonical_json(value: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no whitespace, UTF-8. The input to every digest.

    Raises:
        ValueError: NaN or an infinity; TypeError: a value JSON cannot hold.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def sha256_digest(data: bytes) -> str:
    """``sha256:<64 hex>`` of ``data``; digests always carry their algorithm."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_digest(value: Any, what: str) -> str:
    """``value`` if it is ``sha256:<64 lowercase hex>``; else StoreDataInvalid naming ``what``."""
    if not isinstance(value, str) or not DIGEST.match(value):
        raise StoreDataInvalid(f"{what}: not a sha256 digest: {str(value)[:80]!a}")
    return value


def hex_of(digest: str) -> str:
    """The 64 hex digits of a checked ``sha256:<hex>`` digest (how store paths name objects)."""
    return check_digest(digest, "digest").removeprefix("sha256:")


def hash_stream(f: IO[bytes]) -> tuple[str, int]:
    """``(sha256:<hex>, size in bytes)`` of what a binary file object holds from its position."""
    h = hashlib.sha256()
    size = 0
    while chunk := f.read(CHUNK):
        h.update(chunk)
        size += len(chunk)
    return "sha256:" + h.hexdigest(), size


def hash_file(path: str | Path) -> tuple[str, int]:
    """``(sha256:<hex>, size in bytes)`` of a local file."""
    with open(path, "rb") as f:
        return hash_stream(f)


class DigestMismatch(StoreDataInvalid):
    """Bytes read did not match their digest or size (:func:`copy_verified`); ``found`` says
    what was read instead (``sha256:<hex>, <n> bytes``, or that it is longer)."""

    def __init__(self, message: str, found: str) -> None:
        super().__init__(message)
        self.found = found


def copy_verified(
    src: IO[bytes],
    out: IO[bytes] | None,
    digest: str,
    size: int,
    what: str,
    on_bytes: Callable[[int], None] | None = None,
) -> None:
    """Stream ``src`` into ``out`` (None: only check), reading at most ``size`` + 1 bytes, and
    check that the bytes are exactly ``size`` long and hash to ``digest``. ``on_bytes`` is told
    the length of every chunk read (a progress bar).

    Raises:
        DigestMismatch: the bytes differ (``what`` names the object); ``out`` then holds a
            prefix the caller must discard.
    """
    h = hashlib.sha256()
    seen = 0
    while seen <= size and (chunk := src.read(min(CHUNK, size + 1 - seen))):
        h.update(chunk)
        seen += len(chunk)
        if out is not None and seen <= size:
            out.write(chunk)
        if on_bytes is not None:
            on_bytes(len(chunk))
    found = "sha256:" + h.hexdigest()
    if seen > size:
        raise DigestMismatch(
            f"{what} is corrupt (expected {digest}, {size} bytes; it is longer)", "it is longer"
        )
    if found != digest or seen != size:
        raise DigestMismatch(
            f"{what} is corrupt (expected {digest}, {size} bytes; found {found}, {seen} bytes)",
            f"{found}, {seen} bytes",
        )


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("a key appears twice")
    return out


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_strict(data: bytes, what: str) -> Any:
    """The JSON value of untrusted ``data``, in any spelling: UTF-8, no duplicate keys, no NaN
    or infinities.

    Raises:
        StoreDataInvalid: anything else, or nested deeper than the interpreter recurses
            (``what`` names the object).
    """
    try:
        return json.loads(
            data.decode("utf-8"),
            object_pairs_hook=_no_duplicates,
            parse_constant=_no_constants,
        )
    except (UnicodeError, ValueError, RecursionError) as exc:
        raise StoreDataInvalid(f"{what}: malformed JSON ({ascii(str(exc))[:120]})") from None


def parse_canonical(data: bytes, what: str) -> Any:
    """The JSON value of ``data``, accepted only when ``data`` is its canonical form.

    Raises:
        StoreDataInvalid: not UTF-8, not JSON, nested too deeply, duplicate keys, NaN or
            infinities, lone surrogates, or any other spelling than :func:`canonical_json`'s.
    """
    value = parse_strict(data, what)
    try:
        canonical = canonical_json(value)
    except (ValueError, TypeError, RecursionError) as exc:
        raise StoreDataInvalid(f"{what}: malformed JSON ({ascii(str(exc))[:120]})") from None
    if canonical != data:
        raise StoreDataInvalid(f"{what}: not in canonical form (sorted keys, no whitespace)")
    return value


SHORT_HEX = 12
"""Hex digits of the short form printed for digests (docker's image IDs use 12 too)."""


def short(digest: str) -> str:
    """``sha256:<64 hex>`` -> ``sha256:<first 12 hex>``: what human output prints, accepted back
    wherever a manifest is (while it stays unique in the store:
    :func:`neuronbuild.store.names.resolve`)."""
    algorithm, _, hexdigest = digest.partition(":")
    return f"{algorithm}:{hexdigest[:SHORT_HEX]}"
