"""The folder store: content addressing, publish order, atomicity, refs and untrusted data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.graph import Graph
from neuronbuild.keys import canonical_json, sha256_digest
from neuronbuild.node.materialize import lay_out
from neuronbuild.store.cas import Store, parse_ref
from neuronbuild.store.records import FileRecord, Manifest, UnitRecord
from neuronbuild.store.tiered import TieredStore
from tests.lib.builders import stored_unit


def test_blobs_are_stored_under_their_sha256(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    src = tmp_path / "f"
    src.write_bytes(b"hello")
    digest, size = store.put_file(src)
    assert digest == sha256_digest(b"hello") and size == 5
    assert Path(store.layout.blob(digest)).read_bytes() == b"hello"
    assert store.layout.blob(digest).endswith(f"blobs/sha256/{digest[7:9]}/{digest[7:]}")
    assert not list((tmp_path / "store" / "tmp").iterdir())


@pytest.mark.parametrize(
    "ref", ["a/b/c", "../x", "demo/", "/latest", "demo/la test", "", "la test"]
)
def test_bad_refs_are_user_errors(ref: str) -> None:
    with pytest.raises(UserError):
        parse_ref(ref)


def test_a_bare_name_is_its_latest_ref() -> None:
    assert parse_ref("demo") == ("demo", "latest")
    assert parse_ref("demo/prod") == ("demo", "prod")


def test_a_corrupt_blob_is_never_materialised(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    record = store.put_unit(stored_unit(store, tmp_path))
    manifest = Manifest("demo", {}, (record,))
    blob = Path(store.layout.blob(record.files[0].digest))
    blob.write_bytes(b"neff bytez")  # same size, one byte flipped
    root = tmp_path / "vllm-cache"
    with pytest.raises(StoreDataInvalid, match="corrupt"):
        lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not [p for p in root.rglob("*") if p.is_file()]


def test_materialise_reports_missing_blobs_by_path_before_writing(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    record = store.put_unit(stored_unit(store, tmp_path))
    manifest = Manifest("demo", {}, (record,))
    os.unlink(store.layout.blob(record.files[0].digest))
    with pytest.raises(StoreDataInvalid, match=r"neuron/compile_cache/abc/graph\.neff"):
        lay_out(manifest, manifest.digest, TieredStore(store), tmp_path / "root")


HOSTILE_PATHS = ["../escape", "/etc/passwd", "a/../../b", "a//b", "./a", "a\\b", ""]


@pytest.mark.parametrize("path", HOSTILE_PATHS)
def test_hostile_paths_in_a_manifest_are_rejected(tmp_path: Path, path: str) -> None:
    raw = {
        "schema": "neuronbuild.manifest/1",
        "name": "x",
        "recipe": {},
        "units": [
            {
                "schema": "neuronbuild.unit-record/1",
                "key": sha256_digest(canonical_json({})),
                "factors": {},
                "graphs": [],
                "toolchain": {},
                "files": [
                    {"path": path, "digest": sha256_digest(b""), "size": 0, "executable": False}
                ],
            }
        ],
    }
    with pytest.raises(StoreDataInvalid, match="unsafe path"):
        Manifest.from_bytes(canonical_json(raw), "test")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "malformed JSON"),
        (b'{"schema":"neuronbuild.manifest/99"}', "unknown manifest schema"),
        (b"[]", "expected an object"),
    ],
)
def test_malformed_manifests_are_rejected(data: bytes, message: str) -> None:
    with pytest.raises(StoreDataInvalid, match=message):
        Manifest.from_bytes(data, "test")


def test_an_executable_file_never_changes_the_mode_of_the_local_blob(tmp_path: Path) -> None:
    """A hard link shares its inode, so a chmod on the laid-out file would make the store's blob
    (and every other lay-out linking it) executable too."""
    store = Store(str(tmp_path / "store"), create=True)
    (tmp_path / "tool").write_bytes(b"#!/bin/sh\n")
    digest, size = store.put_file(tmp_path / "tool")
    blob = Path(store.layout.blob(digest))
    blob_mode = blob.stat().st_mode
    assert not os.access(blob, os.X_OK)

    def manifest(executable: bool) -> Manifest:
        factors = {"schema": "t", "executable": executable}
        record = store.put_unit(
            UnitRecord(
                sha256_digest(canonical_json(factors)),
                factors,
                (Graph.dynamic(),),
                (FileRecord("entry/tool", digest, size, executable),),
                {},
            )
        )
        return Manifest("demo", {}, (record,))

    plain, executable = manifest(False), manifest(True)
    # A fresh lay-out, and one over an earlier lay-out that hard-linked the blob.
    lay_out(executable, executable.digest, TieredStore(store), tmp_path / "fresh")
    lay_out(plain, plain.digest, TieredStore(store), tmp_path / "over")
    assert (tmp_path / "over" / "entry/tool").stat().st_ino == blob.stat().st_ino
    lay_out(executable, executable.digest, TieredStore(store), tmp_path / "over")
    for root in ("fresh", "over"):
        assert os.access(tmp_path / root / "entry/tool", os.X_OK)
        assert (tmp_path / root / "entry/tool").read_bytes() == b"#!/bin/sh\n"
    assert blob.stat().st_mode == blob_mode
