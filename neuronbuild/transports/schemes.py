"""Every store URL scheme: one table of scheme -> backend factory -> install hint -> atomic
writes, read lazily (as fsspec's ``registry.py`` finds its file systems). It is the only door to
a backend: :class:`~neuronbuild.store.cas.Store` opens its URL here, so a new transport is one
module and one row.

A scheme the table lacks goes to any fsspec file system that knows it (:data:`OTHER`): readable,
and writable only by the ``--last-writer-wins`` opt-in, since its writes are not atomic.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from neuronbuild.errors import UserError

if TYPE_CHECKING:
    from neuronbuild.transports.backends import Backend, PlacesAt


@dataclass(frozen=True)
class SchemeRow:
    """Where a scheme's backend comes from: ``factory`` (``module:function``, called with the URL,
    the ``--last-writer-wins`` choice and the store's places, :data:`~.backends.PlacesAt`,
    returning a :class:`~.backends.Backend`), what to
    install when it cannot be imported (``install``, appended to the error), and whether its
    writes are atomic (create-if-absent and compare-and-swap; ``atomic``), as the contract suite
    ``tests/store/conformance.py`` holds each to."""

    factory: str
    install: str
    atomic: bool


SHIPPED = "it ships with neuronbuild: reinstall neuronbuild (make install)"
FOLDER = SchemeRow("neuronbuild.transports.backends:open_folder", SHIPPED, True)
S3 = SchemeRow(
    "neuronbuild.transports.backends:open_object", "pip install s3fs (make install)", True
)
REGISTRY = SchemeRow("neuronbuild.store.oci:open_registry", SHIPPED, True)

SCHEMES: dict[str, SchemeRow] = {
    "": FOLDER,  # a path
    "file": FOLDER,
    "local": FOLDER,
    "s3": S3,
    "s3a": S3,
    "oci": REGISTRY,
    "oci+http": REGISTRY,
}
"""Every scheme a store URL may name with a backend of its own (``""``: a plain path)."""

OTHER = SchemeRow(
    "neuronbuild.transports.backends:open_other",
    "install the fsspec implementation that provides the scheme",
    False,
)
"""Any other scheme fsspec knows (``memory://``, ``gcs://`` with gcsfs installed, ...)."""


def scheme_of(url: str) -> str:
    """The scheme of store URL ``url`` as written (``s3``, ``oci+http``; ``""`` for a path; a
    chained fsspec URL's whole chain, ``simplecache::s3``, which no row names). Not folded to
    lower case: fsspec and the registry client read schemes as written, so ``S3://`` is refused
    by fsspec, naming it, as before the table."""
    scheme, sep, _ = url.partition("://")
    return scheme if sep else ""


def row_of(url: str) -> SchemeRow:
    """The row that opens ``url``: its scheme's, else :data:`OTHER`."""
    return SCHEMES.get(scheme_of(url), OTHER)


def atomic_schemes() -> list[str]:
    """The stores whose writes are atomic, as a message lists them: each such row once, by its
    first scheme (``s3://``; the folder row as ``folders``)."""
    rows: dict[SchemeRow, str] = {}
    for scheme, row in SCHEMES.items():
        if row.atomic:
            rows.setdefault(row, f"{scheme}://" if scheme else "folders")
    return list(rows.values())


def open_backend(url: str, last_writer_wins: bool, places: PlacesAt) -> Backend:
    """The backend that reads and writes store ``url``, from its scheme's row, writing its
    temporaries and locks where ``places`` (the store's layout at the backend's root) says.

    Raises:
        UserError: the URL is malformed for its backend, or the backend's module (or the
            fsspec implementation it needs) cannot be imported (with the row's install hint).
        StoreError: the backend cannot reach its store.
    """
    row = row_of(url)
    module, _, name = row.factory.partition(":")
    try:
        factory: Callable[[str, bool, PlacesAt], Backend]
        factory = getattr(importlib.import_module(module), name)
        return factory(url, last_writer_wins, places)
    except ImportError as exc:
        raise UserError(f"--cache {url!r}: {exc}; {row.install}") from None
