"""The store's contract, written once against an abstract ``store_url`` fixture and run for every
backend by ``test_conformance.py`` (the pattern of fsspec's ``tests/abstract/``: one class of
tests, a subclass per implementation that supplies the fixture).

:class:`StoreContract` holds for every writable backend, used one writer at a time: content
addressing, create-if-absent (the first unit record wins), compare-and-swap refs, history oldest
first, blobs verified on every read, listing, delete and the gc sweep. :class:`AtomicContract`
adds what only atomic backends promise (folders, S3): moves that race keep one unbroken history
chain, and publish order holds at every write. :class:`ReadOnlyContract` is what a store without
atomic writes (and without ``--last-writer-wins``) refuses, and what it still reads.

The tests use the public :class:`~neuronbuild.store.cas.Store` API; they go under it (to the
backend) only to plant a fault a reader must catch: a short or flipped blob, a tampered manifest.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.digest import sha256_digest
from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.store import cas
from neuronbuild.store.cas import RefConflict, Store
from neuronbuild.store.gc import DAY, collect_garbage
from neuronbuild.store.records import FileRecord, Manifest, UnitRecord
from neuronbuild.transports.backends import SwapConflict
from tests.lib.builders import publish_build, stored_unit
from tests.lib.claims import (
    audit,
    blob_bytes,
    blob_digest,
    check_chain,
    distinct_manifests,
    small_recipe,
)


def between_read_and_swap(
    monkeypatch: pytest.MonkeyPatch, mover: Store, target: str, meanwhile: Callable[[], None]
) -> list[bool]:
    """Run ``meanwhile`` once, when ``mover`` next moves a ref to ``target``, between its read of
    the ref and its swap (where :meth:`Store.move_ref` checks the manifest is there). Returns a
    list that holds one ``True`` once it ran."""
    real = Store.has_manifest
    ran: list[bool] = []

    def has_manifest(self: Store, digest: str) -> bool:
        if self is mover and digest == target and not ran:
            ran.append(True)
            meanwhile()
        return real(self, digest)

    monkeypatch.setattr(Store, "has_manifest", has_manifest)
    return ran


class StoreContract:
    """What every writable backend does, one writer at a time."""

    @pytest.fixture
    def store_url(self) -> str:
        """A fresh, empty, existing store root: each backend's test class supplies it."""
        raise NotImplementedError

    @pytest.fixture
    def connect(self, store_url: str) -> Callable[[], Store]:
        """A new :class:`Store` at ``store_url`` on each call (another writer), opened as the
        backend needs."""
        return lambda: Store(store_url)

    @pytest.fixture
    def store(self, connect: Callable[[], Store]) -> Store:
        return connect()

    # Blobs: content addressing, verified reads.

    def test_a_blob_is_stored_under_the_sha256_of_its_bytes_and_read_back_verified(
        self, store: Store, tmp_path: Path
    ) -> None:
        src = tmp_path / "f"
        src.write_bytes(b"hello")
        assert store.put_file(src) == (sha256_digest(b"hello"), 5)
        file = FileRecord("f", sha256_digest(b"hello"), 5)
        assert store.has_blob(file) and store.check_blob(file) is None
        store.fetch_blob(file, tmp_path / "out")
        assert (tmp_path / "out").read_bytes() == b"hello"

    @pytest.mark.parametrize("fault", ["flipped", "short", "long"])
    def test_a_blob_whose_bytes_do_not_match_its_name_is_refused_on_read(
        self, store: Store, tmp_path: Path, fault: str
    ) -> None:
        good = b"x" * 1000
        file = FileRecord("entry/graph", sha256_digest(good), len(good))
        planted = {"flipped": b"y" + good[1:], "short": good[:-1], "long": good + b"x"}[fault]
        store.backend.put(store.layout.blob(file.digest), planted)
        with pytest.raises(StoreDataInvalid, match=file.digest[7:]):
            store.fetch_blob(file, tmp_path / "out")
        assert not (tmp_path / "out").exists()
        assert list(tmp_path.glob(".out.*")) == []  # nor a temporary left beside it
        problem = store.check_blob(file)
        assert problem is not None and store.blob_url(file.digest) in problem

    def test_a_missing_blob_is_refused_on_read_and_reported_by_the_check(
        self, store: Store, tmp_path: Path
    ) -> None:
        file = FileRecord("entry/graph", blob_digest(0), len(blob_bytes(0)))
        with pytest.raises(StoreDataInvalid, match="is missing"):
            store.fetch_blob(file, tmp_path / "out")
        assert store.check_blob(file) == f"{store.blob_url(file.digest)}: missing (entry/graph)"

    @pytest.mark.parametrize(
        "count",
        [cas.LIST_THRESHOLD, cas.LIST_THRESHOLD + 1, pytest.param(3 * 64, marks=pytest.mark.slow)],
    )
    def test_the_presence_check_finds_every_missing_or_short_blob_at_any_count(
        self, store: Store, count: int
    ) -> None:
        """Both sides of the count above which one listing replaces a request per blob."""
        entries = [FileRecord(f"f{i}", blob_digest(i), len(blob_bytes(i))) for i in range(count)]
        absent, short = entries[count // 2], entries[-1]
        for i, entry in enumerate(entries):
            if entry is not absent:
                data = blob_bytes(i)[:-1] if entry is short else blob_bytes(i)
                store.backend.put(store.layout.blob(entry.digest), data)
        assert store.missing_blobs(entries) == [absent, short]
        assert not store.has_blob(absent) and not store.has_blob(short)
        assert store.has_blob(entries[0])
        assert store.missing_blobs(entries[:1]) == []

    def test_a_deleted_blob_is_gone(self, store: Store, tmp_path: Path) -> None:
        record = stored_unit(store, tmp_path, b"to delete")
        [file] = record.files
        store.delete_blob(file)
        assert not store.has_blob(file)
        assert store.missing_blobs([file]) == [file]

    # Unit records: create-if-absent.

    def test_the_first_unit_record_for_a_key_wins_and_a_later_builder_adopts_it(
        self, store: Store, tmp_path: Path
    ) -> None:
        first = stored_unit(store, tmp_path, b"first build")
        assert store.put_unit(first) == first
        other = stored_unit(store, tmp_path, b"second build")
        second = UnitRecord(first.key, first.factors, first.graphs, other.files, {})
        assert store.put_unit(second) == first
        assert store.get_unit(first.key) == first

    def test_a_unit_record_is_refused_while_its_blobs_are_missing(
        self, store: Store, tmp_path: Path
    ) -> None:
        record = stored_unit(store, tmp_path, b"neff bytes")
        store.delete_blob(record.files[0])
        with pytest.raises(StoreError, match="lacks blobs"):
            store.put_unit(record)
        assert store.get_unit(record.key) is None and not store.has_unit(record.key)

    # Manifests: named by their hash, sealed only when complete.

    def test_a_manifest_is_named_by_the_hash_of_its_bytes_and_read_back_equal(
        self, store: Store, tmp_path: Path
    ) -> None:
        record = store.put_unit(stored_unit(store, tmp_path, b"neff bytes"))
        manifest = Manifest("demo", {"name": "demo"}, (record,))
        digest = store.put_manifest(manifest)
        assert digest == sha256_digest(manifest.to_bytes())
        assert store.get_manifest(digest) == manifest
        assert store.put_manifest(manifest) == digest  # sealing it again changes nothing

    def test_a_manifest_whose_bytes_do_not_match_its_name_is_refused(
        self, store: Store, tmp_path: Path
    ) -> None:
        record = store.put_unit(stored_unit(store, tmp_path, b"neff bytes"))
        digest = store.put_manifest(Manifest("demo", {}, (record,)))
        path = store.layout.manifest(digest)
        data = store.backend.read(path, 1 << 20)
        assert data is not None
        store.backend.put(path, data.replace(b'"demo"', b'"evil"'))
        with pytest.raises(StoreDataInvalid, match="do not hash"):
            store.get_manifest(digest)

    def test_sealing_refuses_a_manifest_whose_unit_record_or_blob_is_missing(
        self, store: Store, tmp_path: Path
    ) -> None:
        unsealed = stored_unit(store, tmp_path, b"never published")
        with pytest.raises(StoreError, match="not published"):
            store.put_manifest(Manifest("demo", {}, (unsealed,)))
        [digest] = distinct_manifests(store, tmp_path, 1)
        manifest = store.get_manifest(digest)
        store.delete_blob(manifest.files()[0])
        with pytest.raises(StoreError, match="cannot seal, the blob of"):
            store.put_manifest(Manifest("claims", {"other": 1}, manifest.units))
        with pytest.raises(StoreError, match="lacks blobs"):
            store.put_unit(manifest.units[0])
        assert store.manifest_digests() == [digest]

    # Refs: compare-and-swap, history oldest first.

    def test_a_ref_moves_only_from_the_version_its_mover_read(
        self, store: Store, tmp_path: Path
    ) -> None:
        m0, m1, m2 = distinct_manifests(store, tmp_path, 3)  # claims/latest is at m0
        with pytest.raises(RefConflict):
            store.move_ref("claims", "latest", m1, expected=None)  # "absent" is a version too
        with pytest.raises(RefConflict):
            store.move_ref("claims", "latest", m1, expected=m2)
        assert store.get_ref("claims", "latest") == m0
        store.move_ref("claims", "latest", m1, expected=m0)
        assert store.get_ref("claims", "latest") == m1
        with pytest.raises(StoreError, match="unknown manifest"):
            store.move_ref("claims", "latest", "sha256:" + "0" * 64, expected=m1)
        assert store.get_ref("claims", "latest") == m1
        check_chain(store, "claims", "latest", moves=2)

    def test_a_swap_with_a_stale_version_is_refused_and_changes_nothing(self, store: Store) -> None:
        """The backend's own compare-and-swap, under :meth:`Store.move_ref`'s check: a writer
        that read the ref before another's swap must lose at its own swap."""
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
        self, connect: Callable[[], Store], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Mover A reads the ref, then B moves it before A swaps: A must fail (compare-and-swap),
        B's move must stay in the history, and the chain must be unbroken."""
        store = connect()
        m0, m1, m2 = distinct_manifests(store, tmp_path, 3)
        overtaker = connect()
        overtaken = between_read_and_swap(
            monkeypatch, store, m2, lambda: overtaker.move_ref("claims", "latest", m1, m0)
        )
        with pytest.raises(RefConflict):
            store.move_ref("claims", "latest", m2, expected=m0)
        assert overtaken
        assert store.get_ref("claims", "latest") == m1
        check_chain(store, "claims", "latest", moves=2)
        assert [m.manifest for m in store.ref_history("claims", "latest")] == [m0, m1]

    def test_history_lists_every_move_oldest_first(self, store: Store, tmp_path: Path) -> None:
        manifests = distinct_manifests(store, tmp_path, 4)
        for digest in [*manifests[1:], manifests[0]]:  # and back to the first
            store.set_ref("claims", "latest", digest)
        history = store.ref_history("claims", "latest")
        assert [m.manifest for m in history] == [*manifests, manifests[0]]
        assert [m.previous for m in history] == [None, *manifests]
        assert [m.time for m in history] == sorted(m.time for m in history)

    # Listing.

    def test_the_listing_names_every_ref_and_manifest_and_resolves_them(
        self, store: Store, tmp_path: Path
    ) -> None:
        m0, m1 = distinct_manifests(store, tmp_path, 2)
        store.set_ref("claims", "prod", m1)
        assert store.refs() == {"claims/latest": m0, "claims/prod": m1}
        assert sorted(store.manifest_digests()) == sorted([m0, m1])
        assert store.resolve("claims") == m0  # a bare name is its latest ref
        assert store.resolve("claims/prod") == m1
        assert store.resolve(m1) == m1
        with pytest.raises(UserError, match="claims/latest"):
            store.resolve("claims/nosuchtag")  # a miss lists what exists
        summary = store.summary()
        blobs = {f.digest for d in (m0, m1) for f in store.get_manifest(d).files()}
        assert (summary["n_manifests"], summary["n_blobs"]) == (2, len(blobs))


class AtomicContract(StoreContract):
    """What atomic backends (exclusive create, conditional writes) add: many writers at once;
    and the gc sweep, which needs the modification times they report (fsspec's memory file
    system, the last-writer-wins example, reports none, so nothing there is ever old enough)."""

    def test_gc_sweeps_what_no_ref_reaches_once_past_the_grace_period_and_keeps_the_rest(
        self, store: Store, tmp_path: Path
    ) -> None:
        dead_recipe = small_recipe(tmp_path) | {"name": "dead", "max_num_seqs": 2}
        dead = publish_build(store, dead_recipe, tmp_path, "d")
        live = publish_build(store, small_recipe(tmp_path), tmp_path, "a")
        store.backend.delete(store.layout.ref("dead", "latest"))  # dead's build is orphaned
        within = collect_garbage(store, now=time.time())
        assert not any(within.deleted.values()) and store.has_manifest(dead)
        report = collect_garbage(store, now=time.time() + 2 * DAY)
        assert store.manifest_digests() == [live]
        assert report.deleted["manifests"] and report.deleted["blobs"]
        assert audit(store) == []

    def test_concurrent_movers_leave_one_unbroken_chain_of_their_successful_moves(
        self, connect: Callable[[], Store], tmp_path: Path
    ) -> None:
        """Four movers, each moving the ref to manifests of its own (no manifest comes back:
        see the ABA test below), three times; every move that reported success is on the
        chain."""
        store = connect()
        manifests = distinct_manifests(store, tmp_path, 1 + 4 * 3)
        moved = []
        barrier = threading.Barrier(4)

        def mover(i: int) -> None:
            mine = connect()
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
        # distinct_manifests moved the ref once before the movers started.
        check_chain(store, "claims", "latest", moves=1 + len(moved))
        landed = [m.manifest for m in store.ref_history("claims", "latest")[1:]]
        assert sorted(landed) == sorted(moved)

    def test_a_ref_moved_away_and_back_during_a_move_keeps_every_move_in_its_history(
        self, connect: Callable[[], Store], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A ref's version is its content (folder bytes, S3 ETag = MD5), so a ref moved away and
        back between a mover's read and its swap lets the swap land (ABA); the chain, walked by
        ``previous`` links rather than intent time, still holds the moves in between."""
        store = connect()
        m0, m1, m2 = distinct_manifests(store, tmp_path, 3)
        other = connect()

        def away_and_back() -> None:
            other.move_ref("claims", "latest", m1, expected=m0)
            other.move_ref("claims", "latest", m0, expected=m1)

        between_read_and_swap(monkeypatch, store, m2, away_and_back)
        try:
            store.move_ref("claims", "latest", m2, expected=m0)
            landed = 4
        except RefConflict:
            landed = 3
        check_chain(store, "claims", "latest", moves=landed)

    def test_set_ref_retries_until_its_move_lands_on_top_of_the_others(
        self, connect: Callable[[], Store], tmp_path: Path
    ) -> None:
        store = connect()
        manifests = distinct_manifests(store, tmp_path, 4)
        threads = [
            threading.Thread(target=connect().set_ref, args=("claims", "latest", m))
            for m in manifests[1:]
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check_chain(store, "claims", "latest", moves=4)
        assert {m.manifest for m in store.ref_history("claims", "latest")} == set(manifests)

    def test_publish_order_blobs_then_unit_records_then_manifest_then_ref(
        self, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """At the moment each record lands, everything it names is already in the store."""
        backend_type = type(store.backend)
        checked: list[str] = []

        def complete_before(path: str) -> None:
            kind = path.removeprefix(store.root + "/").split("/")[0]
            if kind == "units":
                record = store.get_unit("sha256:" + path.rsplit("/", 1)[-1].removesuffix(".json"))
                assert record is not None
                assert store.missing_blobs(record.files) == [], f"{path} landed before its blobs"
            elif kind == "manifests":
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


class ReadOnlyContract:
    """A store at a URL without atomic writes, opened without ``last_writer_wins``: every write
    is refused with one line that names the opt-in, and what is there still reads."""

    REFUSAL = "pass --last-writer-wins to write anyway"

    @pytest.fixture
    def published(self) -> tuple[str, str]:
        """A store URL holding one build, written through the opt-in, and its manifest."""
        raise NotImplementedError

    def test_every_write_is_refused_with_the_opt_in_named(
        self, published: tuple[str, str], tmp_path: Path
    ) -> None:
        url, digest = published
        store = Store(url)
        manifest = store.get_manifest(digest)
        src = tmp_path / "f"
        src.write_bytes(b"new bytes")
        writes = {
            "check_writable": store.check_writable,
            "put_file": lambda: store.put_file(src),
            "put_unit": lambda: store.put_unit(
                UnitRecord("sha256:" + "1" * 64, {}, (), manifest.units[0].files, {})
            ),
            "put_manifest": lambda: store.put_manifest(
                Manifest("claims", {"x": 1}, manifest.units)
            ),
            "set_ref": lambda: store.set_ref("claims", "prod", digest),
            "delete_blob": lambda: store.delete_blob(manifest.files()[0]),
            "delete_manifest": lambda: store.delete_manifest(digest),
        }
        for name, write in writes.items():
            with pytest.raises(UserError) as refused:
                write()
            assert self.REFUSAL in str(refused.value) and "\n" not in str(refused.value), name
        assert store.refs() == {"claims/latest": digest}
        assert store.manifest_digests() == [digest]

    def test_what_is_there_still_reads_verified(
        self, published: tuple[str, str], tmp_path: Path
    ) -> None:
        url, digest = published
        store = Store(url)
        assert store.resolve("claims") == digest
        for file in store.get_manifest(digest).files():
            assert store.check_blob(file) is None
            store.fetch_blob(file, tmp_path / "out")
