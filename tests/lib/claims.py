"""Helpers for the claim tests: a moto S3 server per test module, distinct manifests to move a ref
between, and a full consistency audit of a store after a crash."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.digest import sha256_digest
from neuronbuild.orchestrate.verify import verify_manifest
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest, UnitRecord
from tests.lib.builders import cpu_recipe, model_folder, publish_build
from tests.lib.s3 import moto_s3
from tests.lib.seaweed import INSTALL_HINT, seaweed_s3, weed_binary

BUCKET = "neuronbuild-claims"


@pytest.fixture(scope="module")
def s3_root() -> Iterator[str]:
    """``s3://BUCKET`` on a moto server on loopback, its environment set in this process."""
    with moto_s3(BUCKET):
        yield f"s3://{BUCKET}"


@pytest.fixture(scope="module")
def seaweed_root() -> Iterator[str]:
    """``s3://BUCKET`` on a SeaweedFS S3 gateway on loopback (a real S3-compatible server, started
    for the module), its environment set in this process. Without ``weed`` the tests fail,
    saying how to install it: the dev extra always installs it, so a skip could only hide a
    broken install."""
    if weed_binary() is None:
        pytest.fail(INSTALL_HINT)
    with seaweed_s3(BUCKET):
        yield f"s3://{BUCKET}"


def fresh_url(kind: str, tmp_path: Path, root: str | None) -> str:
    """A new, empty store URL: a folder under ``tmp_path`` or a new prefix under ``root``."""
    name = uuid.uuid4().hex[:10]
    if kind == "folder":
        (tmp_path / name).mkdir()
        return str(tmp_path / name)
    assert root is not None
    return f"{root}/{name}"


def small_recipe(tmp_path: Path) -> dict[str, Any]:
    """The cpu recipe ``claims``, its model folder under ``tmp_path``."""
    return cpu_recipe(name="claims", cpu_isa="host", model=str(model_folder(tmp_path)))


def distinct_manifests(store: Store, tmp_path: Path, count: int) -> list[str]:
    """``count`` sealed manifests of one recipe name (their recipes differ), all in ``store``."""
    first = publish_build(store, small_recipe(tmp_path), tmp_path, "m")
    units = store.get_manifest(first).units
    return [first] + [
        store.put_manifest(Manifest("claims", {"variant": i}, units)) for i in range(1, count)
    ]


def audit(store: Store) -> list[str]:
    """Every inconsistency a reader could meet in ``store``: a blob whose bytes do not hash to its
    name, a unit record that does not parse or lacks an intact blob, a manifest that does not
    parse, lacks a unit record or an intact blob, an index naming a missing manifest, a ref to
    anything but a complete manifest or index, and a
    ref whose history chain does not end where it points. Empty when consistent."""
    problems: list[str] = []
    backend, layout = store.backend, store.layout
    for path in backend.find(layout.folder("blobs")):
        with backend.open_read(path) as f:
            got = hashlib.sha256(f.read()).hexdigest()
        if got != path.rsplit("/", 1)[-1]:
            problems.append(f"blob {path} holds other bytes")
    for path in backend.find(layout.folder("units")):
        key = "sha256:" + path.rsplit("/", 1)[-1].removesuffix(".json")
        try:
            record = store.get_unit(key)
        except Exception as exc:
            problems.append(f"unit {path}: {exc}")
            continue
        assert isinstance(record, UnitRecord)
        problems += [f"unit {key}: {p}" for e in record.files if (p := store.check_blob(e))]
    for digest in store.manifest_digests():
        try:
            manifest = store.get_manifest(digest)
        except Exception as exc:
            problems.append(f"manifest {digest}: {exc}")
            continue
        problems += [
            f"manifest {digest}: no unit {u.key}"
            for u in manifest.units
            if not store.has_unit(u.key)
        ]
        problems += [
            f"manifest {digest}: {p}" for p in verify_manifest(store, digest, deep=True).problems
        ]
    for digest in store.index_digests():
        try:
            index = store.get_index(digest)
        except Exception as exc:
            problems.append(f"index {digest}: {exc}")
            continue
        problems += [
            f"index {digest}: missing manifest {m}"
            for m in index.manifests()
            if not store.has_manifest(m)
        ]
    for ref, digest in store.refs().items():
        if not store.has_manifest(digest) and not store.is_index(digest):
            problems.append(f"ref {ref} -> missing manifest {digest}")
        name, tag = ref.split("/")
        chain = store.ref_history(name, tag)
        if not chain or chain[-1].manifest != digest:
            problems.append(f"ref {ref}: its history does not end at {digest}")
    return problems


def check_chain(store: Store, name: str, tag: str, moves: int, off_chain: int = 0) -> None:
    """The ref's history is one unbroken chain of ``moves`` compare-and-swap moves: it starts
    from nothing, each move starts where the previous one ended, it ends where the ref points,
    and at most ``off_chain`` entries (of moves a killed writer never made) are left off it."""
    entries, off = store.ref_chain(name, tag)
    chain = [move for _, move in entries]
    assert [m.previous for m in chain[1:]] == [m.manifest for m in chain[:-1]]
    assert chain and chain[0].previous is None
    assert chain[-1].manifest == store.get_ref(name, tag)
    assert len(chain) == moves, (len(chain), moves)
    assert len(off) <= off_chain, off


def blob_bytes(i: int) -> bytes:
    return f"blob {i}".encode() * 10


def blob_digest(i: int) -> str:
    return sha256_digest(blob_bytes(i))


def age(root: Path, seconds: float) -> None:
    """Set back the modification time of every file under ``root`` by ``seconds`` (gc reads ages
    off the store's clock, so a folder store is aged by its file times)."""
    for path in root.rglob("*"):
        if path.is_file():
            stat = path.stat()
            os.utime(path, (stat.st_atime - seconds, stat.st_mtime - seconds))
