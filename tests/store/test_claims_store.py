"""The store's headline claims, each isolated: compare-and-swap refs whose history is one unbroken
chain (folders and S3), atomic writes (temporary file then rename), durable writes (fsync of the
file before its name, of the folder after), publish order (blobs, unit records, manifest, ref),
and a presence check that finds every missing blob however many there are."""

from __future__ import annotations

import builtins
import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import StoreError
from neuronbuild.store import cas
from neuronbuild.store.backends import SwapConflict
from neuronbuild.store.cas import RefConflict, Store
from neuronbuild.store.records import FileRecord, Manifest
from tests.conftest import publish_build
from tests.lib.claims import (
    audit,
    blob_bytes,
    blob_digest,
    check_chain,
    distinct_manifests,
    fresh_url,
    s3_root,
    small_recipe,
)

__all__ = ["s3_root"]  # the fixture, imported for this module's S3 cases


@pytest.fixture(params=["folder", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh empty store: a folder, or a prefix on the module's S3 server."""
    root = request.getfixturevalue("s3_root") if request.param == "s3" else None
    return fresh_url(request.param, tmp_path, root)


# Compare-and-swap.


def test_a_swap_with_a_stale_version_is_refused_and_changes_nothing(
    store_url: str, tmp_path: Path
) -> None:
    store = Store(store_url)
    path = store.layout.ref("claims", "latest")
    store.backend.swap(path, b"one\n", None)
    _, stale = store.backend.read_versioned(path, 4096)
    store.backend.swap(path, b"two\n", stale)
    with pytest.raises(SwapConflict):
        store.backend.swap(path, b"three\n", stale)
    with pytest.raises(SwapConflict):
        store.backend.swap(path, b"four\n", None)  # "absent" is a version too
    assert store.backend.read(path, 4096) == b"two\n"


def test_a_mover_overtaken_between_read_and_swap_loses_and_history_stays_one_chain(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mover A reads the ref, then B moves it before A swaps: A must fail (compare-and-swap),
    B's move must stay in the history, and the chain must be unbroken."""
    store = Store(store_url)
    m0, m1, m2 = distinct_manifests(store, tmp_path, 3)
    overtaker = Store(store_url)
    real = Store.has_manifest
    overtaken = []

    def has_manifest(self: Store, digest: str) -> bool:
        # Called by move_ref between its read of the ref and its swap.
        if self is store and digest == m2 and not overtaken:
            overtaken.append(True)
            overtaker.move_ref("claims", "latest", m1, expected=m0)
        return real(self, digest)

    monkeypatch.setattr(Store, "has_manifest", has_manifest)
    with pytest.raises(RefConflict):
        store.move_ref("claims", "latest", m2, expected=m0)
    assert overtaken
    assert store.get_ref("claims", "latest") == m1
    check_chain(store, "claims", "latest", moves=2)
    assert [m.manifest for m in store.ref_history("claims", "latest")] == [m0, m1]


def test_concurrent_movers_leave_one_unbroken_chain_of_their_successful_moves(
    store_url: str, tmp_path: Path
) -> None:
    """Four movers, each moving the ref to manifests of its own (no manifest comes back: see the
    ABA test below), three times; every move that reported success is on the chain."""
    store = Store(store_url)
    manifests = distinct_manifests(store, tmp_path, 1 + 4 * 3)
    moved = []
    barrier = threading.Barrier(4)

    def mover(i: int) -> None:
        mine = Store(store_url)
        barrier.wait()
        for round_ in range(3):
            target = manifests[1 + 3 * i + round_]
            try:
                mine.move_ref("claims", "latest", target, mine.get_ref("claims", "latest"))
            except RefConflict:
                continue
            moved.append(target)

    threads = [threading.Thread(target=mover, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert moved
    # publish_build moved the ref once before the movers started.
    check_chain(store, "claims", "latest", moves=1 + len(moved))
    landed = [m.manifest for m in store.ref_history("claims", "latest")[1:]]
    assert sorted(landed) == sorted(moved)


@pytest.mark.xfail(
    strict=True,
    reason="known fault: a ref's version is its content (folder bytes, S3 ETag = MD5), so a ref "
    "moved away and back between a mover's read and its swap lets the swap land (ABA), and "
    "the moves in between fall off the history chain, which is ordered by intent time",
)
def test_a_ref_moved_away_and_back_during_a_move_keeps_every_move_in_its_history(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(store_url)
    m0, m1, m2 = distinct_manifests(store, tmp_path, 3)
    other = Store(store_url)
    real = Store.has_manifest
    moved = []

    def has_manifest(self: Store, digest: str) -> bool:
        if self is store and digest == m2 and not moved:
            moved.append(True)
            other.move_ref("claims", "latest", m1, expected=m0)
            other.move_ref("claims", "latest", m0, expected=m1)  # and back
        return real(self, digest)

    monkeypatch.setattr(Store, "has_manifest", has_manifest)
    try:
        store.move_ref("claims", "latest", m2, expected=m0)
        landed = 4
    except RefConflict:
        landed = 3
    check_chain(store, "claims", "latest", moves=landed)


def test_set_ref_retries_until_its_move_lands_on_top_of_the_others(
    store_url: str, tmp_path: Path
) -> None:
    store = Store(store_url)
    manifests = distinct_manifests(store, tmp_path, 4)
    threads = [
        threading.Thread(target=Store(store_url).set_ref, args=("claims", "latest", m))
        for m in manifests[1:]
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check_chain(store, "claims", "latest", moves=4)
    assert {m.manifest for m in store.ref_history("claims", "latest")} == set(manifests)


# Presence of blobs.


@pytest.mark.parametrize("count", [cas.LIST_THRESHOLD, cas.LIST_THRESHOLD + 1, 3 * 64])
def test_the_presence_check_finds_every_missing_or_short_blob_at_any_count(
    store_url: str, tmp_path: Path, count: int
) -> None:
    store = Store(store_url)
    entries = [FileRecord(f"f{i}", blob_digest(i), len(blob_bytes(i))) for i in range(count)]
    absent, short = entries[count // 2], entries[-1]
    for i, entry in enumerate(entries):
        if entry is absent:
            continue
        data = blob_bytes(i)[:-1] if entry is short else blob_bytes(i)
        store.backend.put(store.layout.blob(entry.digest), data)
    assert store.missing_blobs(entries) == [absent, short]
    assert not store.has_blob(absent) and not store.has_blob(short)
    assert store.has_blob(entries[0])
    assert store.missing_blobs(entries[:1]) == []


def test_sealing_refuses_a_manifest_whose_blob_is_gone(store_url: str, tmp_path: Path) -> None:
    store = Store(store_url)
    [digest] = distinct_manifests(store, tmp_path, 1)
    manifest = store.get_manifest(digest)
    store.delete_blob(manifest.files()[0])
    with pytest.raises(StoreError, match="cannot seal, the blob of"):
        store.put_manifest(Manifest("claims", {"other": 1}, manifest.units))
    with pytest.raises(StoreError, match="lacks blobs"):
        store.put_unit(manifest.units[0])


# Atomic and durable folder writes.


class DyingWrites:
    """Make every file the folder backend writes fail half way (a full disk, a crash): the data
    written so far stays where it was written."""

    def __init__(self) -> None:
        self.real_open = builtins.open

    def __call__(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = self.real_open(file, mode, *args, **kwargs)
        if "w" not in mode and "x" not in mode:
            return f
        real_write = f.write

        def write(data: bytes) -> int:
            real_write(data[: len(data) // 2])
            f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        f.write = write
        return f


def test_a_folder_write_that_dies_half_way_leaves_the_old_object_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    backend = store.backend
    old = store.layout.ref("claims", "latest")
    backend.put(old, b"old bytes\n")
    source = tmp_path / "blob"
    source.write_bytes(b"x" * 100_000)
    monkeypatch.setattr("neuronbuild.store.backends.open", DyingWrites(), raising=False)
    new = [store.layout.unit("sha256:" + "1" * 64), store.layout.blob("sha256:" + "2" * 64)]
    with pytest.raises(StoreError):
        backend.put(old, b"new bytes that never fully land\n")
    with pytest.raises(StoreError):
        backend.create(new[0], b"{}" * 1000)
    with pytest.raises(StoreError):
        backend.put_file(source, new[1])
    with pytest.raises(StoreError):
        backend.swap(old, b"swapped\n", b"old bytes\n")
    assert Path(old).read_bytes() == b"old bytes\n"
    assert not any(Path(p).exists() for p in new)


class DurabilityTrace:
    """Records fsync (with the path of the descriptor), rename and link calls, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, str, str]] = []
        real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

        def fsync(fd: int) -> None:
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), ""))
            real_fsync(fd)

        def replace(src: Any, dst: Any, **kw: Any) -> None:
            real_replace(src, dst, **kw)
            self.events.append(("name", os.path.realpath(src), os.path.realpath(dst)))

        def link(src: Any, dst: Any, **kw: Any) -> None:
            real_link(src, dst, **kw)
            self.events.append(("name", os.path.realpath(src), os.path.realpath(dst)))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "link", link)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name descriptors")
def test_every_published_object_is_synced_before_it_is_named_and_its_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    trace = DurabilityTrace(monkeypatch)
    publish_build(store, small_recipe(tmp_path), tmp_path, "a")
    named = [(i, src, dst) for i, (op, src, dst) in enumerate(trace.events) if op == "name"]
    kinds = {Path(dst).relative_to(store.root).parts[0] for _, _, dst in named}
    assert {"blobs", "units", "manifests", "refs", "history"} <= kinds, kinds
    for i, src, dst in named:
        synced_before = [p for op, p, _ in trace.events[:i] if op == "fsync"]
        synced_after = [p for op, p, _ in trace.events[i + 1 :] if op == "fsync"]
        assert src in synced_before, f"{dst} named before its bytes were synced"
        assert os.path.dirname(dst) in synced_after, f"{dst}: its folder was never synced"


def test_publish_order_blobs_then_unit_records_then_manifest_then_ref(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the moment each record lands, everything it names is already in the store."""
    store = Store(store_url)
    backend_type = type(store.backend)
    checked: list[str] = []

    def complete_before(path: str) -> None:
        kind = path.removeprefix(store.root + "/").split("/")[0]
        if kind == "units":
            record = store.get_unit("sha256:" + path.rsplit("/", 1)[-1].removesuffix(".json"))
            assert record is not None
            assert store.missing_blobs(record.files) == [], f"{path} landed before its blobs"
        elif kind == "manifests":
            checked.append(kind)
            digest = "sha256:" + path.rsplit("/", 1)[-1].removesuffix(".json")
            manifest = store.get_manifest(digest)
            assert all(store.has_unit(u.key) for u in manifest.units), "manifest before units"
            assert store.missing_blobs(manifest.files()) == [], "manifest before blobs"
        elif kind == "refs":
            digest = (store.backend.read(path, 4096) or b"").decode().strip()
            assert store.has_manifest(digest), f"{path} landed before its manifest"
        checked.append(kind)

    for method in ("put", "create", "swap"):
        real = getattr(backend_type, method)

        def spy(self: Any, path: str, *args: Any, _real: Any = real, **kw: Any) -> Any:
            result = _real(self, path, *args, **kw)
            complete_before(path)
            return result

        monkeypatch.setattr(backend_type, method, spy)
    publish_build(store, small_recipe(tmp_path), tmp_path, "a")
    assert {"units", "manifests", "refs"} <= set(checked)
    assert audit(store) == []
