"""A store transport that lives only in the tests: fsspec's in-memory file system with atomic
writes, made so by one process-wide lock and a fresh generation number per write (the version
token its compare-and-swap compares). It is one module and one row of the scheme table
(``neuronbuild.transports.schemes``), to show that a new transport needs nothing more (issue 40); the
store's contract suite runs it as it runs folders, S3 and registries."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import fsspec
import pytest

from neuronbuild.transports import schemes
from neuronbuild.transports.backends import Backend, LastWriterWinsBackend, OnBytes, PlacesAt

SCHEME = "lockedmem"
ROW = schemes.SchemeRow(f"{__name__}:open_locked", "it lives in neuronbuild's tests", True)

_LOCK = threading.RLock()
_COUNTER = itertools.count(1)
_GENERATIONS: dict[str, tuple[int, float]] = {}
"""Each object's generation (a number no other write of any object was given) and write time
(seconds since the epoch): fsspec's memory file system keeps no modification time, which gc's
grace period needs."""


class LockedMemoryBackend(LastWriterWinsBackend):
    """Check-then-write made atomic: every write, and every read that yields a version token,
    holds :data:`_LOCK`; the token is the object's generation, so a swap after A -> B -> A
    still conflicts."""

    def _written(self, path: str) -> None:
        _GENERATIONS[path] = (next(_COUNTER), time.time())

    def read_versioned(self, path: str, limit: int) -> tuple[bytes | None, Any]:
        with _LOCK:
            data, _ = super().read_versioned(path, limit)
            return data, None if data is None else _GENERATIONS.get(path, (0, 0.0))[0]

    def modified(self, path: str, fresh: bool = False) -> float | None:
        with _LOCK:
            return _GENERATIONS[path][1] if self.exists(path) and path in _GENERATIONS else None

    def list_modified(self, prefix: str) -> dict[str, float | None]:
        with _LOCK:
            return {p: self.modified(p) for p in self.find(prefix)}

    def put(self, path: str, data: bytes) -> None:
        with _LOCK:
            super().put(path, data)
            self._written(path)

    def create(self, path: str, data: bytes) -> bool:
        with _LOCK:
            return super().create(path, data)

    def put_file(self, local: str | Path, path: str, on_bytes: OnBytes | None = None) -> None:
        with _LOCK:
            super().put_file(local, path, on_bytes)
            self._written(path)

    def swap(self, path: str, data: bytes, token: Any) -> None:
        with _LOCK:
            super().swap(path, data, token)

    def delete(self, path: str) -> None:
        with _LOCK:
            super().delete(path)
            _GENERATIONS.pop(path, None)

    def delete_if(self, path: str, token: Any) -> bool:
        with _LOCK:
            return super().delete_if(path, token)


def open_locked(url: str, last_writer_wins: bool, places: PlacesAt) -> Backend:
    """The row's factory: ``lockedmem://NAME`` -> a store rooted at ``/NAME`` in memory."""
    name = url.partition("://")[2].strip("/")
    return LockedMemoryBackend(fsspec.filesystem("memory"), places(f"/{name}"), url)


@contextmanager
def registered() -> Iterator[None]:
    """The transport's row in the scheme table for the block, then the table as it was."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(schemes.SCHEMES, SCHEME, ROW)
        yield
