"""Every store backend runs the store's contract (``conformance.py``): a class per backend, each
supplying a fresh store. A new backend is one class here."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from neuronbuild.digest import sha256_digest
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store import cas
from neuronbuild.store.cas import RefConflict, Store
from neuronbuild.store.gc import DAY, collect_garbage
from neuronbuild.store.records import FileRecord
from neuronbuild.transports.backends import SwapConflict
from tests.lib import locked_memory
from tests.lib.builders import publish_build
from tests.lib.claims import (
    audit,
    blob_bytes,
    blob_digest,
    distinct_manifests,
    fresh_url,
    s3_root,
    seaweed_root,
    small_recipe,
)
from tests.lib.faulty_proxy import FaultyProxy
from tests.lib.registry import registry_root
from tests.store.conformance import AtomicContract, ReadOnlyContract, StoreContract

# The module's moto and SeaweedFS servers, for the S3 classes; its registry, for the OCI one.
__all__ = ["registry_root", "s3_root", "seaweed_root"]


def memory_url() -> str:
    """A new, existing root on fsspec's in-memory file system: a scheme without atomic writes."""
    name = f"conformance-{uuid.uuid4().hex[:10]}"
    fsspec.filesystem("memory").mkdir(name)
    return f"memory://{name}"


class TestFolderStore(AtomicContract):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return fresh_url("folder", tmp_path, None)


@pytest.mark.slow  # a server on loopback per module: the folder classes run the contract fast
class TestS3Store(AtomicContract):
    """moto's S3 server on loopback, one per module (``s3_root``)."""

    @pytest.fixture
    def store_url(self, s3_root: str, tmp_path: Path) -> str:
        return fresh_url("s3", tmp_path, s3_root)

    # Racing writers on moto take 2-4 s here: the slow tier runs them on S3 (the fast tier on
    # folders).

    @pytest.mark.slow
    def test_concurrent_movers_leave_one_unbroken_chain_of_their_successful_moves(
        self, connect: Callable[[], Store], tmp_path: Path
    ) -> None:
        super().test_concurrent_movers_leave_one_unbroken_chain_of_their_successful_moves(
            connect, tmp_path
        )

    @pytest.mark.slow
    def test_set_ref_retries_until_its_move_lands_on_top_of_the_others(
        self, connect: Callable[[], Store], tmp_path: Path
    ) -> None:
        super().test_set_ref_retries_until_its_move_lands_on_top_of_the_others(connect, tmp_path)


@pytest.mark.slow  # a server on loopback per module: the folder classes run the contract fast
class TestSeaweedStore(AtomicContract):
    """A real S3-compatible server, SeaweedFS (``weed mini``) on loopback, one per module
    (``seaweed_root``): the S3 backend's conditional writes as another implementation answers
    them."""

    @pytest.fixture
    def store_url(self, seaweed_root: str, tmp_path: Path) -> str:
        return fresh_url("s3", tmp_path, seaweed_root)


class TestLastWriterWinsStore(StoreContract):
    """Any other fsspec scheme, by the ``--last-writer-wins`` opt-in: right for one writer at a
    time (check-then-write), so it runs the contract without the racing writers."""

    @pytest.fixture
    def store_url(self) -> str:
        return memory_url()

    @pytest.fixture
    def connect(self, store_url: str) -> Callable[[], Store]:
        return lambda: Store(store_url, last_writer_wins=True)


class TestLockedMemoryStore(AtomicContract):
    """A transport registered by the tests alone (``tests/lib/locked_memory.py``): one module and
    one row of the scheme table, held to the whole atomic contract, racing writers included."""

    @pytest.fixture
    def store_url(self) -> Iterator[str]:
        with locked_memory.registered():
            name = f"conformance-{uuid.uuid4().hex[:10]}"
            fsspec.filesystem("memory").mkdir(name)
            yield f"{locked_memory.SCHEME}://{name}"


class TestReadOnlyStore(ReadOnlyContract):
    @pytest.fixture
    def published(self, tmp_path: Path) -> tuple[str, str]:
        url = memory_url()
        writer = Store(url, last_writer_wins=True)
        return url, publish_build(writer, small_recipe(tmp_path), tmp_path, "a")


@pytest.mark.slow  # a server on loopback per module: the folder classes run the contract fast
class TestRegistryStore(AtomicContract):
    """The CNCF distribution registry on loopback (``registry_root``), one per module, a
    repository per test. The registry has no conditional write (:mod:`neuronbuild.store.oci`):
    the racing-writer tests hold here because each move is checked on the history chain after
    it settles; the last two tests show where that stops."""

    @pytest.fixture
    def store_url(self, registry_root: str) -> str:
        return f"{registry_root}/conformance/{uuid.uuid4().hex[:10]}"

    def test_gc_sweeps_what_no_ref_reaches_once_past_the_grace_period_and_keeps_the_rest(
        self, store: Store, tmp_path: Path
    ) -> None:
        """On a registry gc deletes the unreachable unit records and manifests (their tags);
        their blobs are then no layer of any tag of ours, and the registry's own garbage
        collector reclaims them (the distribution API lists no blobs to delete)."""
        dead_recipe = small_recipe(tmp_path) | {"name": "dead", "max_num_seqs": 2}
        dead = publish_build(store, dead_recipe, tmp_path, "d")
        live = publish_build(store, small_recipe(tmp_path), tmp_path, "a")
        dead_only = {f.digest for f in store.get_manifest(dead).files()} - {
            f.digest for f in store.get_manifest(live).files()
        }
        store.backend.delete(store.layout.ref("dead", "latest"))
        within = collect_garbage(store, now=time.time())
        assert not any(within.deleted.values()) and store.has_manifest(dead)
        report = collect_garbage(store, now=time.time() + 2 * DAY)
        assert store.manifest_digests() == [live]
        assert report.deleted["manifests"] and report.deleted["units"]
        listed = {
            store.layout.digest_of("blobs", p)
            for p in store.backend.find(store.layout.folder("blobs"))
        }
        assert dead_only and not dead_only & listed
        assert audit(store) == []

    # A registry checks each upload against its digest: no wrong bytes can be planted there.
    # What a reader must still catch, bytes changed after the registry (its storage, a proxy),
    # is served by a fault proxy instead.

    @pytest.mark.parametrize("fault", ["flipped", "short", "long"])
    def test_a_blob_whose_bytes_do_not_match_its_name_is_refused_on_read(
        self, store: Store, tmp_path: Path, fault: str
    ) -> None:
        good = b"x" * 1000
        file = FileRecord("entry/graph", sha256_digest(good), len(good))
        planted = {"flipped": b"y" + good[1:], "short": good[:-1], "long": good + b"x"}[fault]
        with pytest.raises(StoreDataInvalid, match="refused bytes that do not hash"):
            store.backend.put(store.layout.blob(file.digest), planted)
        assert not store.has_blob(file)

    def test_a_blob_served_with_other_bytes_is_refused_on_read(
        self, store: Store, store_url: str, tmp_path: Path
    ) -> None:
        good = b"x" * 1000
        file = FileRecord("entry/graph", sha256_digest(good), len(good))
        store.backend.put(store.layout.blob(file.digest), good)
        host, _, repository = store_url.removeprefix("oci+http://").partition("/")
        with FaultyProxy(
            int(host.rpartition(":")[2]), corrupt_every=1, body_path="/blobs/"
        ) as proxy:
            served = Store(f"oci+http://127.0.0.1:{proxy.port}/{repository}")
            with pytest.raises(StoreDataInvalid, match=file.digest[7:]):
                served.fetch_blob(file, tmp_path / "out")
            assert not (tmp_path / "out").exists()
            assert list(tmp_path.glob(".out.*")) == []
            problem = served.check_blob(file)
            assert problem is not None and served.blob_url(file.digest) in problem

    def test_the_presence_check_finds_every_missing_or_short_blob_at_any_count(
        self, store: Store
    ) -> None:
        """Above the listing threshold too, one request each (a registry lists no blobs)."""
        count = cas.LIST_THRESHOLD + 1
        entries = [FileRecord(f"f{i}", blob_digest(i), len(blob_bytes(i))) for i in range(count)]
        absent = entries[count // 2]
        for i, entry in enumerate(entries):
            if entry is not absent:
                store.backend.put(store.layout.blob(entry.digest), blob_bytes(i))
        wrong_size = FileRecord("short", entries[0].digest, entries[0].size - 1)
        assert store.missing_blobs(entries) == [absent]
        assert store.missing_blobs([wrong_size, *entries[1:]]) == [wrong_size, absent]

    # Where the guarantees stop: a move another writer overwrote is reported when the overwrite
    # lands before the move's check (a read-after-write, then the chain after the settle time),
    # and is lost, reported as landed, when it lands after.

    @staticmethod
    def overwrite(other: Store, name: str, target: str, previous: str) -> None:
        """What a writer that read the ref at ``previous`` writes when it moves it to
        ``target``: its history entry, then the ref, with no check in between."""
        from neuronbuild.store.records import RefMove

        intent = other.layout.history_entry(name, "latest", time.time_ns(), target)
        other.backend.create(intent, RefMove(time.time(), target, previous).to_bytes())
        other.backend.put(other.layout.ref(name, "latest"), (target + "\n").encode())

    @pytest.mark.parametrize("when", ["before its read back", "while it settles"])
    def test_a_move_overwritten_before_its_check_is_reported_not_taken_for_landed(
        self,
        connect: Callable[[], Store],
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        when: str,
    ) -> None:
        store = connect()
        m0, m1, m2 = distinct_manifests(store, tmp_path, 3)
        other = connect()
        ref = store.layout.ref("claims", "latest")
        if when == "before its read back":
            real_put = type(store.backend)._put_object

            def put_then_overwritten(self: Any, path: str, data: bytes) -> str:
                digest = real_put(self, path, data)
                if self is store.backend and path == ref:
                    TestRegistryStore.overwrite(other, "claims", m2, m0)
                return digest

            monkeypatch.setattr(type(store.backend), "_put_object", put_then_overwritten)
        else:
            real_check = Store._check_landed

            def overwritten_then_checked(self: Store, name: str, tag: str, intent: str) -> None:
                TestRegistryStore.overwrite(other, name, m2, m0)
                real_check(self, name, tag, intent)

            monkeypatch.setattr(Store, "_check_landed", overwritten_then_checked)
        with pytest.raises(RefConflict):
            store.move_ref("claims", "latest", m1, expected=m0)
        assert store.get_ref("claims", "latest") == m2
        assert [m.manifest for m in store.ref_history("claims", "latest")] == [m0, m2]

    @pytest.mark.parametrize("write", ["swap", "create"])
    def test_a_write_overwritten_before_its_read_back_is_reported_lost(
        self, store: Store, monkeypatch: pytest.MonkeyPatch, write: str
    ) -> None:
        """The backend's own check (leases and unit records rely on it, with no history): a
        racer that wrote between this write and its read back wins, and this write says so."""
        backend = store.backend
        path = store.layout.lease("sha256:" + "1" * 64)
        token = None
        if write == "swap":
            backend.put(path, b"first")
            token = backend.read_versioned(path, 4096)[1]
        real_put = type(backend)._put_object
        racer = Store(store.url).backend

        def put_then_overwritten(self: Any, where: str, data: bytes) -> str:
            digest = real_put(self, where, data)
            if self is backend:
                real_put(racer, where, b"racer")
            return digest

        monkeypatch.setattr(type(backend), "_put_object", put_then_overwritten)
        if write == "swap":
            with pytest.raises(SwapConflict, match="another writer"):
                backend.swap(path, b"mine", token)
        else:
            assert backend.create(path, b"mine") is False
        assert backend.read(path, 4096) == b"racer"

    def test_a_move_overwritten_after_its_check_is_lost_from_the_chain(
        self, connect: Callable[[], Store], tmp_path: Path
    ) -> None:
        """The limit the README states: a racer that read the ref before this move and writes
        after the move's settle time overwrites a move already reported as landed. The move is
        then off the chain (``ls --history`` does not list it), never silently on it."""
        store = connect()
        m0, m1, m2 = distinct_manifests(store, tmp_path, 3)
        assert store.move_ref("claims", "latest", m1, expected=m0) == m0  # reported as landed
        self.overwrite(connect(), "claims", m2, m0)  # read m0 before that move, wrote after
        chain, off = store.ref_chain("claims", "latest")
        assert [m.manifest for _, m in chain] == [m0, m2]
        assert len(off) == 1 and store.get_ref("claims", "latest") == m2
