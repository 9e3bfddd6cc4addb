"""The tiered store's claims, one regression each (issue 19): a ref is the remote's whenever the
remote answers (the local copy only when it cannot be reached); a bad local manifest or blob is
noted and read again from the remote; a dry run counts a blob only the remote holds as present;
a recheck replaces a corrupt local manifest. The breaks they kill are named in
``tests/claim_breaks.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest
from neuronbuild.store.tiered import TieredStore
from tests.lib.builders import stored_unit


def sealed(store: Store, tmp_path: Path, content: bytes) -> Manifest:
    """A manifest of one unit of one file holding ``content``, sealed in ``store``."""
    record = store.put_unit(stored_unit(store, tmp_path, content))
    manifest = Manifest("app", {"content": content.decode()}, (record,))
    store.put_manifest(manifest)
    return manifest


def two_tiers(tmp_path: Path) -> tuple[TieredStore, Manifest]:
    """A remote holding one sealed manifest, pulled into an empty local tier."""
    remote = Store(str(tmp_path / "remote"), create=True)
    manifest = sealed(remote, tmp_path, b"neff bytes")
    tiers = TieredStore(Store(str(tmp_path / "local"), create=True), remote)
    tiers.fill(manifest.digest)
    return tiers, manifest


def test_the_remote_ref_wins_over_the_local_copy_while_the_remote_answers(
    tmp_path: Path,
) -> None:
    """The local tier's ref is a copy: when the remote moved the ref, or removed it, serve reads
    the remote's answer (no stale local build)."""
    tiers, manifest = two_tiers(tmp_path)
    assert tiers.remote is not None
    newer = sealed(tiers.remote, tmp_path, b"neff newer")
    tiers.local.set_ref("app", "latest", manifest.digest)
    tiers.remote.set_ref("app", "latest", newer.digest)
    assert tiers.get_ref("app", "latest") == newer.digest
    tiers.local.set_ref("app", "gone", manifest.digest)
    assert tiers.get_ref("app", "gone") is None
    assert tiers.notes == []


def test_an_unreachable_remote_falls_back_to_the_local_ref_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The remote fails (a StoreError after retries): the pulled ref is used, with a note."""
    tiers, manifest = two_tiers(tmp_path)
    assert tiers.remote is not None
    tiers.local.set_ref("app", "latest", manifest.digest)

    def unreachable(name: str, tag: str) -> str | None:
        raise StoreError("connection refused")

    monkeypatch.setattr(tiers.remote, "get_ref", unreachable)
    assert tiers.get_ref("app", "latest") == manifest.digest
    assert len(tiers.notes) == 1 and "unreachable (connection refused)" in tiers.notes[0]
    with pytest.raises(StoreError, match="connection refused"):
        tiers.get_ref("app", "never-pulled")


def test_a_corrupt_local_manifest_is_noted_and_read_from_the_remote(tmp_path: Path) -> None:
    tiers, manifest = two_tiers(tmp_path)
    Path(tiers.local.layout.manifest(manifest.digest)).write_bytes(b"{}")
    assert tiers.get_manifest(manifest.digest) == manifest
    assert len(tiers.notes) == 1 and "reading" in tiers.notes[0]


def test_a_corrupt_local_blob_is_fetched_again_and_the_local_tier_repaired(
    tmp_path: Path,
) -> None:
    tiers, manifest = two_tiers(tmp_path)
    [file] = manifest.files()
    Path(tiers.local.layout.blob(file.digest)).write_bytes(b"neff bytez")
    tiers.fetch_blob(file, tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == b"neff bytes"
    assert tiers.local.check_blob(file) is None
    assert len(tiers.notes) == 1 and "fetching it again" in tiers.notes[0]


def test_a_dry_run_counts_a_blob_only_the_remote_holds_and_refuses_one_no_tier_holds(
    tmp_path: Path,
) -> None:
    remote = Store(str(tmp_path / "remote"), create=True)
    manifest = sealed(remote, tmp_path, b"neff bytes")
    tiers = TieredStore(Store(str(tmp_path / "local"), create=True), remote)
    tiers.check_complete(manifest, manifest.digest)  # the fill would fetch it
    [file] = manifest.files()
    remote.delete_blob(file)
    with pytest.raises(StoreDataInvalid, match="1 blob missing"):
        tiers.check_complete(manifest, manifest.digest)


def test_a_recheck_replaces_a_corrupt_local_manifest(tmp_path: Path) -> None:
    """``pull`` into a local tier whose copy of the manifest is corrupt (``recheck``): the
    remote's copy replaces it, noted, so the local tier can serve alone afterwards."""
    tiers, manifest = two_tiers(tmp_path)
    Path(tiers.local.layout.manifest(manifest.digest)).write_bytes(b"{}")
    report = tiers.fill(manifest.digest, recheck=True)
    assert report is not None and any("replacing it" in n for n in report.notes)
    assert tiers.local.get_manifest(manifest.digest) == manifest


def test_a_pulled_manifest_is_read_locally_when_the_remote_is_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Manifests are immutable: a node that pulled one serves it with the remote down."""
    tiers, manifest = two_tiers(tmp_path)
    assert tiers.remote is not None

    def unreachable(digest: str) -> Manifest:
        raise StoreError("connection refused")

    monkeypatch.setattr(tiers.remote, "get_manifest", unreachable)
    assert tiers.get_manifest(manifest.digest) == manifest


def test_a_fill_that_replaced_a_corrupt_local_blob_says_so(tmp_path: Path) -> None:
    """``recheck`` re-hashes what the local tier holds; what it replaced reaches the notes the
    command prints."""
    tiers, manifest = two_tiers(tmp_path)
    [file] = manifest.files()
    Path(tiers.local.layout.blob(file.digest)).write_bytes(b"neff bytez")
    report = tiers.fill(manifest.digest, recheck=True)
    assert report is not None and report.copied == 1
    assert tiers.local.check_blob(file) is None
    assert len(tiers.notes) == 1 and "fetching it again" in tiers.notes[0]


def test_write_through_leaves_the_build_and_its_ref_in_the_local_tier(tmp_path: Path) -> None:
    """After a compile into the remote, the node holds the sealed build and the ref locally, so
    it can serve it without the remote."""
    remote = Store(str(tmp_path / "remote"), create=True)
    manifest = sealed(remote, tmp_path, b"neff bytes")
    tiers = TieredStore(Store(str(tmp_path / "local"), create=True), remote)
    tiers.write_through(manifest.digest, "app", "latest")
    assert tiers.local.get_ref("app", "latest") == manifest.digest
    assert tiers.local.get_manifest(manifest.digest) == manifest
    assert tiers.local.missing_blobs(manifest.files()) == []


def test_a_fill_tells_the_commands_meter_what_it_fetches(tmp_path: Path) -> None:
    """The meter a command passes (``serve`` and ``pull`` show it on stderr) is made once per
    fill that fetches, named ``fetch`` with the bytes and blobs to move, and told every byte."""
    remote = Store(str(tmp_path / "remote"), create=True)
    manifest = sealed(remote, tmp_path, b"neff bytes")
    made: list[tuple[str, int, int]] = []
    moved: list[int] = []

    class Meter:
        def advance(self, n_bytes: int) -> None:
            moved.append(n_bytes)

        def close(self) -> None:
            made.append(("closed", 0, 0))

    def factory(what: str, total: int, n_blobs: int) -> Meter:
        made.append((what, total, n_blobs))
        return Meter()

    tiers = TieredStore(Store(str(tmp_path / "local"), create=True), remote, progress=factory)
    tiers.fill(manifest.digest)
    assert made == [("fetch", 10, 1), ("closed", 0, 0)] and sum(moved) == 10
    tiers.fill(manifest.digest)  # nothing to fetch: no meter
    assert len(made) == 2


def test_a_name_resolves_against_the_remote_or_the_pulled_copy_when_it_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``serve``/``verify`` are given (a ref or a digest prefix) is read as refs are: from
    the remote while it answers, from the local tier when it cannot be reached; a missing ref's
    error carries the caller's hint."""
    tiers, manifest = two_tiers(tmp_path)
    assert tiers.remote is not None
    tiers.remote.set_ref("app", "latest", manifest.digest)
    target = tiers.resolve_target("app/latest")
    assert (target.digest, target.ref) == (manifest.digest, ("app", "latest"))
    with pytest.raises(UserError, match="pull it first") as missing:
        tiers.resolve_target("app/none", hint="pull it first")
    assert "app/latest" in str(missing.value)  # the refs that exist are named

    def unreachable(*args: object) -> object:
        raise StoreError("connection refused")

    for name in ("read_versioned", "find", "list_sizes", "exists"):
        monkeypatch.setattr(tiers.remote.backend, name, unreachable)
    tiers.local.set_ref("app", "latest", manifest.digest)
    assert tiers.resolve_target("app").digest == manifest.digest
    assert tiers.resolve_target(manifest.digest[:19]).digest == manifest.digest
    assert tiers.resolve_target(manifest.digest[:19], "manifest").digest == manifest.digest


def test_a_remote_named_like_the_local_tier_is_the_one_store(tmp_path: Path) -> None:
    """``--cache`` and ``--local-cache`` naming one folder: one store, no copy onto itself."""
    store = Store(str(tmp_path / "store"), create=True)
    other = Store(str(tmp_path / "other"), create=True)
    assert TieredStore(store, Store(store.url)).remote is None
    assert TieredStore(store, other).remote is other


def test_with_no_remote_the_local_store_answers_everything(tmp_path: Path) -> None:
    """``serve --cache <folder>`` alone: refs, names and manifests come from that store."""
    store = Store(str(tmp_path / "store"), create=True)
    manifest = sealed(store, tmp_path, b"neff bytes")
    store.set_ref("app", "prod", manifest.digest)
    tiers = TieredStore(store)
    assert tiers.get_ref("app", "prod") == manifest.digest
    assert tiers.resolve_target("app/prod").digest == manifest.digest
    assert tiers.resolve_target(manifest.digest[:19]).digest == manifest.digest
    assert tiers.get_manifest(manifest.digest) == manifest and tiers.url == store.url
