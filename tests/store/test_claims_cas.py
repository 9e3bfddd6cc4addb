"""The content-addressed store's claims, one regression each (issue 19): the first unit record of
a key wins unless its blobs are gone; the presence check counts a blob of the wrong size as
missing at any count; a ref never moves to a manifest the store lacks; a blob whose bytes do not
match is never written to its destination. The breaks they kill are named in
``tests/claim_breaks.py``."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from neuronbuild.errors import StoreDataInvalid, StoreError
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord
from tests.lib.builders import stored_unit


def test_a_unit_record_whose_blobs_are_gone_is_replaced_by_the_next_build(tmp_path: Path) -> None:
    """First writer wins only while its record can be used: a later build of the same key whose
    blobs are present replaces a record whose blob was lost, and the store serves the new one."""
    store = Store(str(tmp_path / "store"), create=True)
    first = store.put_unit(stored_unit(store, tmp_path, b"first build"))
    store.delete_blob(first.files[0])
    rebuilt = stored_unit(store, tmp_path, b"second build")
    second = dataclasses.replace(rebuilt, key=first.key, factors=first.factors)
    assert store.put_unit(second) == second
    assert store.get_unit(first.key) == second


def test_a_unit_record_with_its_blobs_is_adopted_by_the_next_build(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    first = store.put_unit(stored_unit(store, tmp_path, b"first build"))
    rebuilt = stored_unit(store, tmp_path, b"second build")
    second = dataclasses.replace(rebuilt, key=first.key, factors=first.factors)
    assert store.put_unit(second) == first
    assert store.get_unit(first.key) == first


@pytest.mark.parametrize("n", [1, 3])
def test_a_blob_of_the_wrong_size_is_missing_to_the_presence_check(tmp_path: Path, n: int) -> None:
    """Below the listing threshold too: a short blob (an interrupted upload elsewhere) is missing,
    so sealing a manifest that needs it is refused."""
    store = Store(str(tmp_path / "store"), create=True)
    records = [stored_unit(store, tmp_path, f"blob {i}".encode()).files[0] for i in range(n)]
    Path(store.layout.blob(records[-1].digest)).write_bytes(b"short")
    assert store.missing_blobs(records) == [records[-1]]
    assert not store.has_blob(records[-1])


def test_a_ref_never_moves_to_a_manifest_the_store_lacks(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    absent = "sha256:" + "a" * 64
    with pytest.raises(StoreError, match="unknown manifest"):
        store.move_ref("app", "latest", absent, None)
    assert store.get_ref("app", "latest") is None
    assert store.ref_history("app", "latest") == []


def test_a_blob_whose_bytes_do_not_match_never_reaches_its_destination(tmp_path: Path) -> None:
    """Same size, other bytes: the fetch refuses it and leaves no file (nor a partial one)."""
    store = Store(str(tmp_path / "store"), create=True)
    [file] = stored_unit(store, tmp_path, b"neff bytes").files
    Path(store.layout.blob(file.digest)).write_bytes(b"neff bytez")
    dest = tmp_path / "node" / "graph.neff"
    with pytest.raises(StoreDataInvalid, match="corrupt"):
        store.fetch_blob(file, dest)
    assert not dest.exists() and list(dest.parent.iterdir()) == []
    assert store.check_blob(file) is not None
    assert store.check_blob(FileRecord("x", file.digest, file.size + 1)) is not None
