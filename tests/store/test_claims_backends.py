"""The backends' claims, one regression each (issue 19): a read never returns more than its
limit, nor a truncated object (it refuses it); create is exclusive (the first writer wins);
compare-and-swap refuses a stale version on every writable backend; a read-only store writes
nothing. The breaks they kill are named in ``tests/claim_breaks.py``."""

from __future__ import annotations

import uuid
from pathlib import Path

import fsspec
import pytest

from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.store.cas import Store
from neuronbuild.transports.backends import Backend, SwapConflict


def folder(tmp_path: Path) -> Backend:
    return Store(str(tmp_path / "store"), create=True).backend


def memory(last_writer_wins: bool) -> Backend:
    """An fsspec memory store: last-writer-wins when opted in, else read-only."""
    name = uuid.uuid4().hex
    fsspec.filesystem("memory").mkdir(f"/{name}")
    return Store(f"memory://{name}", create=True, last_writer_wins=last_writer_wins).backend


@pytest.mark.parametrize("kind", ["folder", "last writer wins"])
def test_a_read_refuses_an_object_over_its_limit_and_returns_one_at_it(
    tmp_path: Path, kind: str
) -> None:
    """A record over its size limit is hostile: refused (exit 2), never truncated to the limit
    and parsed; one exactly at the limit is read whole."""
    backend = folder(tmp_path) if kind == "folder" else memory(True)
    at, over = f"{backend.root}/refs/app/at", f"{backend.root}/refs/app/over"
    backend.put(at, b"1234")
    backend.put(over, b"12345")
    assert backend.read(at, 4) == b"1234"
    with pytest.raises(StoreDataInvalid, match="over"):
        backend.read(over, 4)
    assert backend.read(f"{backend.root}/refs/app/absent", 4) is None


@pytest.mark.parametrize("kind", ["folder", "last writer wins"])
def test_create_is_exclusive_and_the_first_writer_wins(tmp_path: Path, kind: str) -> None:
    backend = folder(tmp_path) if kind == "folder" else memory(True)
    path = f"{backend.root}/units/{'a' * 64}.json"
    assert backend.create(path, b"first") is True
    assert backend.create(path, b"second") is False
    assert backend.read(path, 100) == b"first"


@pytest.mark.parametrize("kind", ["folder", "last writer wins"])
def test_a_swap_from_a_stale_version_is_refused_and_writes_nothing(
    tmp_path: Path, kind: str
) -> None:
    backend = folder(tmp_path) if kind == "folder" else memory(True)
    path = f"{backend.root}/refs/app/latest"
    backend.swap(path, b"one\n", None)
    _, token = backend.read_versioned(path, 100)
    backend.swap(path, b"two\n", token)
    for stale in (None, token):
        with pytest.raises(SwapConflict):
            backend.swap(path, b"three\n", stale)
    assert backend.read(path, 100) == b"two\n"


def test_a_read_only_store_writes_nothing_and_says_how_to_write(tmp_path: Path) -> None:
    """A file system without atomic writes, not opted in: every write is one UserError naming
    the option; a create of what is already there answers False (re-publishing is no write)."""
    writer = memory(True)
    path = f"{writer.root}/units/{'b' * 64}.json"
    writer.put(path, b"held")
    reader = Store(writer.url, last_writer_wins=False).backend
    assert reader.create(path, b"other") is False
    for write in (
        lambda: reader.create(f"{writer.root}/units/{'c' * 64}.json", b"x"),
        lambda: reader.put(path, b"x"),
        lambda: reader.swap(f"{writer.root}/refs/app/latest", b"x", None),
        lambda: reader.delete(path),
    ):
        with pytest.raises(UserError, match="--last-writer-wins"):
            write()
    assert reader.read(path, 100) == b"held"
