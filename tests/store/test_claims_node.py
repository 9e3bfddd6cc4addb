"""The node lay-out's claims, one regression each (issue 19): its stamp trusts a folder only while
every file keeps its size, mtime *and inode* and only for the manifest it was written for;
``deep`` re-hashes whatever the stamp says; a file already there is kept only when its bytes
hash right; an engine's completion markers are laid out last. The breaks they kill are named in
``tests/claim_breaks.py``."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import StoreDataInvalid
from neuronbuild.node.materialize import lay_out, register
from neuronbuild.store import cas
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from neuronbuild.store.layout import NODE_STAMP, node_layout_root
from neuronbuild.store.records import Manifest
from neuronbuild.store.tiered import TieredStore
from tests.lib.builders import stored_unit

GRAPH = "neuron/compile_cache/abc/graph.neff"
MARKER = "neuron/compile_cache/abc/.compilation_complete"


def one_file(store: Store, tmp_path: Path, content: bytes, path: str = GRAPH) -> Manifest:
    """A sealed manifest of one unit of one file at ``path`` holding ``content``."""
    record = store.put_unit(stored_unit(store, tmp_path, content, path))
    manifest = Manifest("app", {"content": content.decode()}, (record,))
    store.put_manifest(manifest)
    return manifest


def replace_keeping_size_and_mtime(path: Path, data: bytes) -> None:
    """Put ``data`` (same length) at ``path`` as a new file (a new inode) with the old mtime."""
    old = path.stat()
    assert len(data) == old.st_size
    tmp = path.with_name("replacement")
    tmp.write_bytes(data)
    os.utime(tmp, ns=(old.st_atime_ns, old.st_mtime_ns))
    tmp.replace(path)
    assert path.stat().st_ino != old.st_ino and path.stat().st_mtime_ns == old.st_mtime_ns


def test_a_file_replaced_with_the_same_size_and_mtime_is_caught_by_its_inode(
    tmp_path: Path,
) -> None:
    """The stamp records the inode: a file swapped for another of the same size and mtime (a
    copy tool that preserves times) is re-verified and laid out again, not served."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    replace_keeping_size_and_mtime(root / GRAPH, b"neff bytez")
    again = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not again.cheap
    assert (root / GRAPH).read_bytes() == b"neff bytes"


def test_a_stamp_holds_only_for_the_manifest_it_was_written_for(tmp_path: Path) -> None:
    """A folder laid out for one manifest, then asked for another whose file has the same path
    (and size): the other manifest's bytes are laid out, the first one's stamp is not trusted."""
    store = Store(str(tmp_path / "store"), create=True)
    first = one_file(store, tmp_path, b"neff bytes")
    second = one_file(store, tmp_path, b"neff BYTES")
    root = tmp_path / "node"
    lay_out(first, first.digest, TieredStore(store), root)
    result = lay_out(second, second.digest, TieredStore(store), root)
    assert not result.cheap
    assert (root / GRAPH).read_bytes() == b"neff BYTES"
    assert lay_out(second, second.digest, TieredStore(store), root).cheap


def test_deep_re_hashes_a_file_the_stamp_still_vouches_for(tmp_path: Path) -> None:
    """A file corrupted in place, its size, mtime and inode kept (bit rot): the stamp cannot see
    it, so ``deep`` (``serve --deep-verify``) re-hashes and repairs it from the remote."""
    remote = Store(str(tmp_path / "remote"), create=True)
    manifest = one_file(remote, tmp_path, b"neff bytes")
    local = Store(str(tmp_path / "local"), create=True)
    tiers = TieredStore(local, remote)
    tiers.fill(manifest.digest)
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, tiers, root)
    dest = root / GRAPH
    before = dest.stat()
    with open(dest, "r+b") as f:  # in place: the inode (and a hard-linked blob) is the same
        f.write(b"NEFF")
    os.utime(dest, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert lay_out(manifest, manifest.digest, tiers, root).cheap  # the stamp cannot tell
    repaired = lay_out(manifest, manifest.digest, tiers, root, deep=True)
    assert not repaired.cheap and repaired.linked == 0  # fetched again and copied, not linked
    assert dest.read_bytes() == b"neff bytes"


def test_a_file_already_there_with_the_right_size_but_other_bytes_is_replaced(
    tmp_path: Path,
) -> None:
    """No stamp, a file of the right size already at the path: it is kept only if it hashes to
    the manifest's digest; otherwise the verified blob replaces it."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    root = tmp_path / "node"
    (root / GRAPH).parent.mkdir(parents=True)
    (root / GRAPH).write_bytes(b"stale byte")
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert (root / GRAPH).read_bytes() == b"neff bytes"


def test_an_interrupted_lay_out_never_leaves_a_completion_marker(tmp_path: Path) -> None:
    """Files named in ``last`` (vLLM-Neuron's ``.compilation_complete``) are laid out after every
    other file: a lay-out that fails on a corrupt graph leaves no marker saying the entry is
    complete, whatever order the manifest lists its files in."""
    store = Store(str(tmp_path / "store"), create=True)
    marker = store.put_unit(stored_unit(store, tmp_path, b"done", MARKER))
    graph = store.put_unit(stored_unit(store, tmp_path, b"neff bytes", GRAPH))
    manifest = Manifest("app", {}, (marker, graph))
    store.put_manifest(manifest)
    Path(store.layout.blob(graph.files[0].digest)).write_bytes(b"neff bytez")  # corrupt
    root = tmp_path / "node"
    with pytest.raises(StoreDataInvalid, match="corrupt"):
        lay_out(
            manifest, manifest.digest, TieredStore(store), root, last=(".compilation_complete",)
        )
    assert not (root / MARKER).exists()


def test_a_lay_out_counts_its_files_bytes_and_links(tmp_path: Path) -> None:
    """What ``serve`` reports of a lay-out: every file and byte of the manifest, each file
    hard-linked from the local tier (same file system), and a second start re-verified by the
    stamp alone (nothing linked again)."""
    store = Store(str(tmp_path / "store"), create=True)
    graph = store.put_unit(stored_unit(store, tmp_path, b"neff bytes", GRAPH))
    marker = store.put_unit(stored_unit(store, tmp_path, b"done", MARKER))
    manifest = Manifest("app", {}, (graph, marker))
    store.put_manifest(manifest)
    root = tmp_path / "node"
    first = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert (first.root, first.files, first.bytes, first.linked, first.cheap) == (
        root,
        2,
        len(b"neff bytes") + len(b"done"),
        2,
        False,
    )
    assert (root / GRAPH).stat().st_ino == Path(
        store.layout.blob(graph.files[0].digest)
    ).stat().st_ino
    second = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert (second.root, second.files, second.bytes, second.linked, second.cheap) == (
        root,
        2,
        14,
        0,
        True,
    )


def test_a_symlink_planted_where_a_laid_out_file_was_is_not_trusted(tmp_path: Path) -> None:
    """A symlink in place of a laid-out file (to the very file, so size, mtime and inode all
    match through it) fails the stamp: the next start verifies the bytes again instead of trusting it. (One that
    points outside the folder is refused: ``test_hostile.py``.)"""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    elsewhere = root / "moved-aside"
    (root / GRAPH).rename(elsewhere)
    (root / GRAPH).symlink_to(elsewhere)
    again = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not again.cheap
    assert (root / GRAPH).read_bytes() == b"neff bytes"


def test_files_already_laid_out_right_are_kept_without_a_stamp(tmp_path: Path) -> None:
    """The stamp lost (a lay-out interrupted after its files): the next start re-hashes each file
    and keeps those that hash right, in place (same inode, nothing linked again)."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    inode = (root / GRAPH).stat().st_ino
    (root / ".neuronbuild" / "layout.json").unlink()
    again = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert (again.cheap, again.linked) == (False, 0)
    assert (root / GRAPH).stat().st_ino == inode


def test_where_links_cannot_be_made_each_file_is_copied_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node folder on another file system than the local tier (``os.link`` fails with EXDEV):
    every file is copied, verified, and nothing is left half-linked."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")

    def cross_device(src: object, dst: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr("os.link", cross_device)
    root = tmp_path / "node"
    result = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert (result.files, result.linked) == (1, 0)
    assert (root / GRAPH).read_bytes() == b"neff bytes"
    assert (root / GRAPH).stat().st_nlink == 1
    assert sorted(p.name for p in (root / GRAPH).parent.iterdir()) == ["graph.neff"]


def test_a_registered_lay_out_is_what_gc_removes_once_its_manifest_is_dead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``register`` records the folder serve chose; that record is what lets ``gc`` remove the
    folder once no ref reaches the manifest (and keep it while one does)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "node-cache"))
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    tiers = TieredStore(store)
    root = node_layout_root(manifest.digest)
    lay_out(manifest, manifest.digest, tiers, root)
    register(tiers, manifest.digest, root)
    assert tiers.notes == []
    record = store.backend.read(store.layout.layout_record(manifest.digest), 4096)
    assert record is not None
    assert json.loads(record) == {"manifest": manifest.digest, "root": str(root)}
    store.move_ref("app", "latest", manifest.digest, None)
    later = time.time() + 10 * 86400
    assert "layouts" not in collect_garbage(store, now=later).deleted
    assert (root / GRAPH).is_file()
    store.backend.delete(store.layout.ref("app", "latest"))
    report = collect_garbage(store, now=later)
    assert report.deleted["layouts"] == [store.layout.layout_record(manifest.digest)]
    assert not root.exists()


@pytest.mark.parametrize(
    "stamp",
    [b"not json", b"[]", b'{"files":[],"manifest":"%s"}', b'{"files":{"x":1},"manifest":"%s"}'],
)
def test_a_corrupt_stamp_is_ignored_and_the_folder_verified_again(
    tmp_path: Path, stamp: bytes
) -> None:
    """The stamp is the node's own cache, never trusted blindly: one that does not parse or has
    the wrong shape means a full verification (no traceback, no cheap start)."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    (root / ".neuronbuild" / "layout.json").write_bytes(
        stamp.replace(b"%s", manifest.digest.encode())
    )
    again = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not again.cheap
    assert lay_out(manifest, manifest.digest, TieredStore(store), root).cheap  # stamped anew


def test_an_executable_file_gains_exactly_the_execute_bits(tmp_path: Path) -> None:
    """An executable file (a compiled helper vLLM runs) is laid out with ``+x`` for everyone who
    could read it, and no other bit changes (no one gains write)."""
    store = Store(str(tmp_path / "store"), create=True)
    plain = stored_unit(store, tmp_path, b"#!/bin/sh\n", "entry/tool")
    record = store.put_unit(
        dataclasses.replace(plain, files=(dataclasses.replace(plain.files[0], executable=True),))
    )
    manifest = Manifest("app", {}, (record,))
    store.put_manifest(manifest)
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    blob_mode = Path(store.layout.blob(record.files[0].digest)).stat().st_mode
    assert (root / "entry/tool").stat().st_mode & 0o7777 == (blob_mode | 0o111) & 0o7777


def test_a_laid_out_file_deleted_since_is_laid_out_again(tmp_path: Path) -> None:
    """A file gone from the folder (a user cleaning up, a partial rsync): the stamp does not
    hold, and the next start puts it back."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    (root / GRAPH).unlink()
    again = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not again.cheap
    assert (root / GRAPH).read_bytes() == b"neff bytes"


def counting_hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each blob the store hashes from now on (fetching or re-checking it)."""
    hashed: list[int] = []
    real = cas.copy_verified

    def counted(*args: Any, **kwargs: Any) -> Any:
        hashed.append(args[3])
        return real(*args, **kwargs)

    monkeypatch.setattr(cas, "copy_verified", counted)
    return hashed


def test_a_fresh_node_hashes_each_fetched_byte_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21: a blob this process fetched and verified into the local tier is linked into
    the lay-out without being read again; one the local tier already held is verified once."""
    remote = Store(str(tmp_path / "remote"), create=True)
    manifest = one_file(remote, tmp_path, b"neff bytes")
    hashed = counting_hashes(monkeypatch)
    tiers = TieredStore(Store(str(tmp_path / "local"), create=True), remote)
    tiers.fill(manifest.digest)
    assert lay_out(manifest, manifest.digest, tiers, tmp_path / "node").linked == 1
    assert hashed == [10]  # the fetch's hash, none at the lay-out
    hashed.clear()
    held = TieredStore(Store(str(tmp_path / "local")), remote)  # a later process on the node
    lay_out(manifest, manifest.digest, held, tmp_path / "node2")
    lay_out(manifest, manifest.digest, held, tmp_path / "node3")
    assert hashed == [10]


def test_a_verified_blob_changed_since_is_hashed_again_and_repaired(tmp_path: Path) -> None:
    """The trust lasts while the blob keeps its size, mtime and inode: a blob rewritten after
    the fetch verified it is hashed at the lay-out, found corrupt and fetched again."""
    remote = Store(str(tmp_path / "remote"), create=True)
    manifest = one_file(remote, tmp_path, b"neff bytes")
    local = Store(str(tmp_path / "local"), create=True)
    tiers = TieredStore(local, remote)
    tiers.fill(manifest.digest)
    [file] = manifest.files()
    blob = local.local_blob_path(file)
    assert blob is not None
    before = blob.stat()
    blob.write_bytes(b"NEFF bytes")  # in place: the same inode and size, a later mtime
    os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns + 2_000_000_000))  # coarse clocks
    lay_out(manifest, manifest.digest, tiers, tmp_path / "node")
    assert (tmp_path / "node" / GRAPH).read_bytes() == b"neff bytes"
    assert any("corrupt" in note for note in tiers.notes)


def test_a_lay_out_record_the_local_tier_refuses_is_a_note_naming_it_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    tiers = TieredStore(store)

    def refused(self: Store, digest: str, root: str) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(Store, "put_layout_record", refused)
    register(tiers, manifest.digest, tmp_path / "root")
    assert tiers.notes == [
        f"{store.url}: layout of {manifest.digest[:19]} not recorded "
        "([Errno 30] Read-only file system)"
    ]


def test_the_next_lay_out_removes_what_a_killed_one_left_and_nothing_else(tmp_path: Path) -> None:
    """A lay-out killed mid-way (SIGKILL: no cleanup) leaves its temporary files and no stamp;
    the next lay-out of that root, holding its lock, removes them (issue 46, item 15), and keeps
    every other file, dotted ones included."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    graph = root / GRAPH
    left = [
        graph.with_name(f".{graph.name}.{'a' * 32}.part"),  # a blob being fetched
        graph.with_name(f".{graph.name}.{'b' * 32}.link"),  # being hard-linked into place
        graph.with_name(f".{graph.name}.{'c' * 32}.copy"),  # being copied to chmod it
        root / ".neuronbuild" / f".layout.json.{'d' * 32}.part",  # the stamp being written
    ]
    for path in left:
        path.write_bytes(b"half")
    kept = [graph.with_name(".cache_accessed"), root / f".keep.{'e' * 32}.part.txt"]
    for path in kept:
        path.write_bytes(b"theirs")
    (root / NODE_STAMP).unlink()  # the killed lay-out removed it first
    again = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not again.cheap
    assert [p for p in left if p.exists()] == []
    assert all(p.read_bytes() == b"theirs" for p in kept)


class Crash(BaseException):
    """The machine stops here (not an error a caller could handle)."""


def test_a_node_crashed_at_every_step_of_a_fresh_prepare_serves_only_verified_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 45 item 6: the local tier keeps fetched blobs without an fsync each. A machine that
    crashes loses what was not written back: here, the worst case, every blob's bytes (its
    size kept, as a journal that committed the metadata leaves it) and a new boot id. Crashed
    after each write of a fresh node's fetch and lay-out, then started again, the node lays out
    only bytes that hash to the manifest: the stamp of the boot before is not trusted and each
    torn blob is fetched again."""
    from neuronbuild import folders
    from neuronbuild.node import materialize
    from neuronbuild.transports.backends import FolderBackend

    boot = tmp_path / "boot_id"
    monkeypatch.setattr(folders, "BOOT_ID", boot)
    remote = Store(str(tmp_path / "remote"), create=True)
    records = [
        remote.put_unit(stored_unit(remote, tmp_path, f"neff {i}".encode() * 100, f"e{i}/g.neff"))
        for i in range(3)
    ]
    manifest = Manifest("app", {}, tuple(records))
    digest = remote.put_manifest(manifest)
    steps = {"n": 0, "crash_at": -1}

    def counted(real: Any) -> Any:
        def step(*args: Any, **kwargs: Any) -> Any:
            out = real(*args, **kwargs)
            steps["n"] += 1
            if steps["n"] == steps["crash_at"]:
                raise Crash
            return out

        return step

    for name in ("move_in", "put", "create"):
        monkeypatch.setattr(FolderBackend, name, counted(getattr(FolderBackend, name)))
    monkeypatch.setattr(materialize, "_write_stamp", counted(materialize._write_stamp))

    def prepare(local: Path, root: Path) -> None:
        tiers = TieredStore(Store(str(local), create=True), remote)  # a process of its own
        assert tiers.skip_blob_fsync()  # as serve fetches
        tiers.fill(digest)
        lay_out(manifest, digest, tiers, root)

    boot.write_text("boot-0\n")
    prepare(tmp_path / "whole-local", tmp_path / "whole-root")
    total, crashes = steps["n"], 0
    for at in range(1, total + 1):
        local, root = tmp_path / f"local-{at}", tmp_path / f"root-{at}"
        boot.write_text("boot-0\n")
        steps.update(n=0, crash_at=at)
        with pytest.raises(Crash):
            prepare(local, root)
        crashes += 1
        for blob in (local / "blobs").rglob("*"):  # lost with the page cache: zeros, its
            if blob.is_file():  # size and mtime kept (the journal committed the metadata)
                st = blob.stat()
                blob.write_bytes(bytes(st.st_size))
                os.utime(blob, ns=(st.st_atime_ns, st.st_mtime_ns))
        boot.write_text("boot-1\n")
        steps.update(n=0, crash_at=-1)
        prepare(local, root)
        for file in manifest.files():
            assert (root / file.path).read_bytes() == f"neff {file.path[1]}".encode() * 100, at
        assert materialize.laid_out(root, manifest, digest)
    assert crashes == total >= 6  # blobs, records, the stamp


def test_serve_fetches_without_an_fsync_per_blob_and_pull_with_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the crash test above allows: serve's fetch skips a blob's two fsyncs (file, folder),
    where a remote can give a torn blob again; pull keeps them (a pulled node may have no
    remote), and so does a tier with no remote."""
    remote = Store(str(tmp_path / "remote"), create=True)
    manifest = one_file(remote, tmp_path, b"neff bytes")
    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real(fd))
    counts = []
    for skip in (False, True):
        synced.clear()
        tiers = TieredStore(Store(str(tmp_path / f"local-{skip}"), create=True), remote)
        assert not skip or tiers.skip_blob_fsync()
        tiers.fill(manifest.digest)
        counts.append(len(synced))
    assert counts[0] - counts[1] == 2
    assert not TieredStore(remote).skip_blob_fsync()
