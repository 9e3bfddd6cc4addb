"""The node's stat of laid-out files, pinned one claim at a time (issue 46 item 18): the lay-out
stamp vouches for a file only while its size, its mtime and its inode all hold, for every file of
the manifest, not just the first; a stamp over :data:`MAX_RECORD_BYTES` is never read (the limit
inclusive); and a serve that waited for another one laying out the same root takes that lay-out
as it is. Each test fails when
the check that carries its claim in ``neuronbuild/node/materialize.py`` is removed
(``tests/claim_breaks.py``). (The inode and the manifest digest: ``test_claims_node.py``.)"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from filelock import FileLock

from neuronbuild.node import materialize
from neuronbuild.node.materialize import lay_out
from neuronbuild.store.cas import Store
from neuronbuild.store.layout import NODE_STAMP
from neuronbuild.store.records import Manifest
from neuronbuild.store.tiered import TieredStore
from tests.lib.builders import stored_unit
from tests.store.test_claims_node import GRAPH, one_file

SECOND = "neuron/compile_cache/def/graph.neff"


def cross_device(src: object, dst: object) -> None:
    raise OSError(18, "Invalid cross-device link")


def laid_out_once(
    tmp_path: Path, copies: pytest.MonkeyPatch | None = None
) -> tuple[Store, Manifest, Path]:
    """A store holding a one-file manifest, and the folder it was laid out in; by ``copies``
    (``os.link`` failing from then on, as across file systems) where given, so that a test may
    change a laid-out file in place without changing the blob through a shared inode."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    if copies is not None:
        copies.setattr("os.link", cross_device)
    root = tmp_path / "node"
    assert not lay_out(manifest, manifest.digest, TieredStore(store), root).cheap
    return store, manifest, root


def test_a_file_changed_in_place_with_its_size_and_inode_kept_is_caught_by_its_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A laid-out file rewritten in place with as many bytes (same inode, same size, a later
    mtime) is re-verified and laid out again, not served on the stamp's word."""
    store, manifest, root = laid_out_once(tmp_path, monkeypatch)
    before = (root / GRAPH).stat()
    (root / GRAPH).write_bytes(b"NEFF bytes")
    os.utime(root / GRAPH, ns=(before.st_atime_ns, before.st_mtime_ns + 2_000_000_000))
    assert (root / GRAPH).stat().st_ino == before.st_ino
    again = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not again.cheap
    assert (root / GRAPH).read_bytes() == b"neff bytes"


def test_a_file_changed_in_place_with_its_mtime_and_inode_kept_is_caught_by_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A laid-out file truncated or extended in place, its mtime set back (a tool that keeps
    times), is re-verified and laid out again."""
    store, manifest, root = laid_out_once(tmp_path, monkeypatch)
    before = (root / GRAPH).stat()
    (root / GRAPH).write_bytes(b"neff bytes and more")
    os.utime(root / GRAPH, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = (root / GRAPH).stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    again = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not again.cheap
    assert (root / GRAPH).read_bytes() == b"neff bytes"


def test_the_stamp_vouches_for_every_file_not_only_the_first(tmp_path: Path) -> None:
    """In a manifest of two files, the second one replaced since the lay-out fails the stamp."""
    store = Store(str(tmp_path / "store"), create=True)
    units = tuple(
        store.put_unit(stored_unit(store, tmp_path, content, path))
        for content, path in ((b"first neff", GRAPH), (b"second neff", SECOND))
    )
    manifest = Manifest("app", {"files": 2}, units)
    store.put_manifest(manifest)
    assert [f.path for f in manifest.files()] == [GRAPH, SECOND]
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    (root / SECOND).unlink()
    (root / SECOND).write_bytes(b"SECOND NEFF")
    again = lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not again.cheap
    assert (root / SECOND).read_bytes() == b"second neff"


@pytest.mark.parametrize(("over", "cheap"), [(0, True), (1, False)])
def test_a_stamp_over_the_record_limit_is_never_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, over: int, cheap: bool
) -> None:
    """The stamp is read only up to the record limit, inclusive: one of exactly the limit holds,
    one a byte over it means a full verification (so a huge stamp is never parsed)."""
    store, manifest, root = laid_out_once(tmp_path)
    size = (root / NODE_STAMP).stat().st_size
    monkeypatch.setattr(materialize, "MAX_RECORD_BYTES", size - over)
    assert lay_out(manifest, manifest.digest, TieredStore(store), root).cheap is cheap


def test_a_serve_that_waited_for_another_laying_out_the_root_takes_its_lay_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two serves of one root: the one that took the lock second finds the root laid out by the
    first (its stamp holds) and starts on it, writing nothing and re-hashing nothing."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = one_file(store, tmp_path, b"neff bytes")
    root = tmp_path / "node"
    take_lock = materialize.lay_out_lock
    others: list[bool] = []

    def the_other_serve_first(where: Path) -> FileLock | None:
        if not others:  # the other serve held the lock first, and laid the root out
            others.append(True)
            others.append(lay_out(manifest, manifest.digest, TieredStore(store), root).cheap)
        return take_lock(where)

    monkeypatch.setattr(materialize, "lay_out_lock", the_other_serve_first)
    first = lay_out(manifest, manifest.digest, TieredStore(store), root)
    monkeypatch.undo()
    stamp = (root / NODE_STAMP).stat()
    assert others == [True, False] and (first.cheap, first.linked) == (True, 0)
    assert lay_out(manifest, manifest.digest, TieredStore(store), root).cheap
    assert (root / NODE_STAMP).stat().st_ino == stamp.st_ino


@pytest.mark.parametrize("to", ["another file of the manifest", "a copy of its own bytes"])
def test_a_symlink_planted_where_a_file_belongs_is_replaced_by_the_file(
    tmp_path: Path, to: str
) -> None:
    """A lay-out never writes through a link planted in the root (it put the first file's bytes
    into the second's and kept the link for good) nor keeps one pointing at the right bytes."""
    first, second = "neuron/compile_cache/a/graph.neff", "neuron/compile_cache/b/graph.neff"
    store = Store(str(tmp_path / "store"), create=True)
    units = tuple(
        store.put_unit(stored_unit(store, tmp_path, data, path))
        for data, path in ((b"first neff", first), (b"second neff", second))
    )
    manifest = Manifest("app", {}, units)
    store.put_manifest(manifest)
    root = tmp_path / "node"
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    if to == "a copy of its own bytes":
        (root / "aside").write_bytes(b"first neff")
        target = root / "aside"
    else:
        target = root / second
    (root / first).unlink()
    (root / first).symlink_to(target)
    lay_out(manifest, manifest.digest, TieredStore(store), root)
    assert not (root / first).is_symlink()
    assert (root / first).read_bytes() == b"first neff"
    assert (root / second).read_bytes() == b"second neff"


def test_a_manifest_file_at_the_top_of_the_root_is_mirrored_like_any_other(
    tmp_path: Path,
) -> None:
    """A manifest path with no folder (``top.bin``) checked against a mirror: a folder of ``.``
    was refused as escaping the mirror, so a node image holding one never served."""
    from neuronbuild.node.mirrors import mirrors

    store = Store(str(tmp_path / "store"), create=True)
    unit = store.put_unit(stored_unit(store, tmp_path, b"top", "top.bin"))
    manifest = Manifest("app", {}, (unit,))
    root, mirror = tmp_path / "image", tmp_path / "mirror"
    root.mkdir()
    (root / "top.bin").write_bytes(b"top")
    mirror.mkdir()
    assert mirrors(mirror, root, manifest) is False  # nothing linked yet: not an error
    (mirror / "top.bin").symlink_to(root / "top.bin")
    assert mirrors(mirror, root, manifest) is True
