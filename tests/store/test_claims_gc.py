"""gc's claims, one regression each (issue 19): what a ref's last ``keep_last`` moves keep, that
an unsealed shard's blobs survive, that a move gc sees only by its history entry keeps its
manifest, that a live ref's lock stays, and that a dry run removes no node folder. The breaks
they kill are named in ``tests/claim_breaks.py``."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from neuronbuild.digest import canonical_json
from neuronbuild.orchestrate.verify import verify_manifest
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import IN_FLIGHT_SECONDS, GcReport, collect_garbage
from neuronbuild.store.records import Manifest, RefMove, UnitRecord
from tests.lib.builders import stored_unit
from tests.lib.claims import age

LATER = time.time() + 10 * 86400


def sealed(store: Store, tmp_path: Path, i: int) -> str:
    """A manifest of one unit record (one blob of its own), sealed in ``store``, no ref to it."""
    record = store.put_unit(stored_unit(store, tmp_path, f"unit bytes {i}".encode()))
    return store.put_manifest(Manifest("app", {"variant": i}, (record,)))


def moved_through(store: Store, tmp_path: Path, n: int) -> list[str]:
    """``n`` manifests, ``app/latest`` moved through each in turn (the last is current)."""
    digests = [sealed(store, tmp_path, i) for i in range(n)]
    for previous, digest in zip([None, *digests], digests, strict=False):
        store.move_ref("app", "latest", digest, previous)
    return digests


@pytest.mark.parametrize(("keep_last", "kept"), [(0, 1), (1, 1), (2, 2), (None, 3)])
def test_keep_last_keeps_the_manifests_of_exactly_the_last_moves(
    tmp_path: Path, keep_last: int | None, kept: int
) -> None:
    """``--keep-last N`` keeps the manifests of the ref's last N moves (0: only what the ref
    points at; unset: every move); older ones are swept with their unit records and blobs."""
    store = Store(str(tmp_path / "store"), create=True)
    digests = moved_through(store, tmp_path, 3)
    collect_garbage(store, keep_last=keep_last, now=LATER)
    assert [store.has_manifest(d) for d in digests] == [False] * (3 - kept) + [True] * kept
    for digest in digests[-kept:]:
        assert not verify_manifest(store, digest, deep=True).problems
    assert len(store.backend.find(store.layout.folder("blobs"))) == kept


def test_the_blobs_of_a_young_unit_record_survive_though_the_blobs_are_old(
    tmp_path: Path,
) -> None:
    """A shard still being published (unit record written, manifest not yet sealed) keeps its
    blobs, even when the blobs were uploaded before the grace period began."""
    store = Store(str(tmp_path / "store"), create=True)
    record = store.put_unit(stored_unit(store, tmp_path, b"an unsealed shard"))
    unit_path = store.layout.unit(record.key)
    os.utime(unit_path, (LATER, LATER))  # the record is young at LATER, its blob is not
    report = collect_garbage(store, now=LATER)
    assert "blobs" not in report.deleted and "units" not in report.deleted
    assert store.check_blob(record.files[0]) is None


def test_an_old_orphan_unit_record_goes_with_its_blob(tmp_path: Path) -> None:
    """The counterpart: the same shard, old, is swept with its blob."""
    store = Store(str(tmp_path / "store"), create=True)
    record = store.put_unit(stored_unit(store, tmp_path, b"an abandoned shard"))
    report = collect_garbage(store, now=LATER)
    assert report.deleted["units"] == [store.layout.unit(record.key)]
    assert report.deleted["blobs"] == [store.layout.blob(record.files[0].digest)]


def at_mark(action: Callable[[], None]) -> Callable[[str], None]:
    """gc's ``at_step`` hook that runs ``action`` once gc has marked (writers racing its sweep)."""
    return lambda step: action() if step == "marked" else None


def gc_racing_a_move_to(store: Store, orphan: str) -> GcReport:
    """gc of a store whose every object is old, while a move of ``app/prod`` to ``orphan`` has
    written its history entry (after gc's mark) but not yet swapped the ref."""

    def a_move_half_way() -> None:
        entry = store.layout.history_entry("app", "prod", time.time_ns(), orphan)
        store.backend.create(entry, RefMove(time.time(), orphan, None).to_bytes())

    age(Path(store.root), 10 * 86400)
    return collect_garbage(store, at_step=at_mark(a_move_half_way))


def test_a_move_seen_only_by_its_history_entry_keeps_its_manifest_and_everything_it_uses(
    tmp_path: Path,
) -> None:
    """A ref move that has written its history entry but not yet swapped the ref when gc sweeps
    (the move checks the manifest after the entry): gc puts the manifest back and keeps its unit
    records and blobs, so the move that then lands points at a complete build."""
    store = Store(str(tmp_path / "store"), create=True)
    orphan = sealed(store, tmp_path, 0)

    report = gc_racing_a_move_to(store, orphan)
    assert report.restored == [orphan]
    store.backend.swap(store.layout.ref("app", "prod"), (orphan + "\n").encode(), None)
    assert not verify_manifest(store, orphan, deep=True).problems


def test_the_lock_of_a_live_ref_stays_and_the_lock_of_a_gone_ref_goes(tmp_path: Path) -> None:
    """A folder store's compare-and-swap lock is swept only once its ref is gone."""
    store = Store(str(tmp_path / "store"), create=True)
    [live] = moved_through(store, tmp_path, 1)
    store.move_ref("app", "gone", live, None)
    store.backend.delete(store.layout.ref("app", "gone"))
    locks = {tag: store.layout.ref_lock(store.layout.ref("app", tag)) for tag in ("latest", "gone")}
    assert all(store.backend.exists(lock) for lock in locks.values())
    report = collect_garbage(store, now=LATER)
    assert report.deleted["locks"] == [locks["gone"]]
    assert store.backend.exists(locks["latest"])


def test_a_dry_run_removes_no_node_folder_and_a_real_run_removes_the_dead_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A layout record of a dead manifest, naming the folder serve chose for it: ``gc --dry-run``
    lists the record and leaves the folder; ``gc`` removes both."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "node-cache"))
    store = Store(str(tmp_path / "store"), create=True)
    dead = sealed(store, tmp_path, 0)
    folder = tmp_path / "node-cache" / "neuronbuild" / "layouts" / dead[7:23]
    (folder / "entry").mkdir(parents=True)
    store.backend.put(
        store.layout.layout_record(dead), canonical_json({"manifest": dead, "root": str(folder)})
    )
    dry = collect_garbage(store, dry_run=True, now=LATER)
    assert dry.deleted["layouts"] == [store.layout.layout_record(dead)]
    assert (folder / "entry").is_dir() and store.has_manifest(dead)
    collect_garbage(store, now=LATER)
    assert not folder.exists()
    assert not store.backend.exists(store.layout.layout_record(dead))


def test_a_unit_record_a_kept_manifest_uses_is_never_swept(tmp_path: Path) -> None:
    """The mark follows ref -> manifest -> unit record -> blob, however old each is."""
    store = Store(str(tmp_path / "store"), create=True)
    [live] = moved_through(store, tmp_path, 1)
    (unit,) = store.get_manifest(live).units
    assert isinstance(unit, UnitRecord)
    report = collect_garbage(store, now=LATER)
    assert "units" not in report.deleted and "blobs" not in report.deleted
    assert store.get_unit(unit.key) == unit


def test_the_bytes_freed_are_the_swept_blobs_sizes(tmp_path: Path) -> None:
    """``gc`` reports the bytes it frees: the sum of the swept blobs' sizes (records and other
    kinds are not counted)."""
    store = Store(str(tmp_path / "store"), create=True)
    for content in (b"a shard of 19 bytes", b"another, of 20 bytes"):
        store.put_unit(stored_unit(store, tmp_path, content))
    report = collect_garbage(store, now=LATER)
    assert len(report.deleted["blobs"]) == 2 and len(report.deleted["units"]) == 2
    assert report.bytes == 19 + 20
    assert report.to_json()["bytes"] == 39


def test_the_default_grace_period_is_one_day(tmp_path: Path) -> None:
    """An unreachable object a day and a half old is swept by default; one half a day old
    stays."""
    store = Store(str(tmp_path / "store"), create=True)
    record = store.put_unit(stored_unit(store, tmp_path, b"an abandoned shard"))
    assert not collect_garbage(store, now=time.time() + 0.5 * 86400).deleted
    report = collect_garbage(store, now=time.time() + 1.5 * 86400)
    assert report.deleted["units"] == [store.layout.unit(record.key)]


def test_old_temporary_files_are_swept_and_young_ones_kept(tmp_path: Path) -> None:
    """A temporary file of an atomic write a killed publisher left behind goes once it is older
    than the grace period; one a live writer is filling stays."""
    store = Store(str(tmp_path / "store"), create=True)
    store.backend.put(store.layout.tmp("left-behind"), b"half")
    store.backend.put(store.layout.tmp("being-written"), b"half")
    os.utime(store.layout.tmp("being-written"), (LATER, LATER))
    report = collect_garbage(store, now=LATER)
    assert report.deleted["tmp"] == [store.layout.tmp("left-behind")]
    assert store.backend.exists(store.layout.tmp("being-written"))


def test_no_grace_period_sweeps_what_a_live_writer_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gc --older-than 0`` beside a running compile (issue 46, item 17): a temporary file a
    writer is filling, the lock of a ref it is creating and its multipart upload stay until
    they are an hour old (a concurrent gc swept them; the writer then failed on its vanished
    ``.part`` file); older ones go."""
    store = Store(str(tmp_path / "store"), create=True)
    part = store.layout.tmp("0123.part")
    store.backend.put(part, b"half")
    lock = store.layout.ref_lock(store.layout.ref("app", "new"))
    os.makedirs(os.path.dirname(lock))
    Path(lock).write_bytes(b"")
    cutoffs: list[float] = []

    def aborted(older_than: float, dry_run: bool) -> list[str]:
        cutoffs.append(older_than)
        return []

    monkeypatch.setattr(store.backend, "abort_abandoned_uploads", aborted)
    now = time.time()
    assert not collect_garbage(store, older_than_days=0, now=now).deleted
    assert cutoffs == [now - IN_FLIGHT_SECONDS]
    report = collect_garbage(store, older_than_days=0, now=now + IN_FLIGHT_SECONDS + 60)
    assert report.deleted == {"tmp": [part], "locks": [lock]}


def test_a_young_unit_records_timing_stays_though_the_timing_is_old(tmp_path: Path) -> None:
    """A timing goes with its unit: an unsealed shard (young unit record) keeps its timing."""
    from neuronbuild.store.records import UnitTiming

    store = Store(str(tmp_path / "store"), create=True)
    record = store.put_unit(stored_unit(store, tmp_path, b"an unsealed shard"))
    os.utime(store.layout.unit(record.key), (LATER, LATER))
    shape = "sha256:" + "5" * 64
    store.put_timing(UnitTiming(record.key, shape, 12.5))
    report = collect_garbage(store, now=LATER)
    assert "timings" not in report.deleted
    assert [t.key for t in store.timings({shape})] == [record.key]


def test_a_raced_manifest_put_back_keeps_its_node_layout_record(tmp_path: Path) -> None:
    """The manifest a racing move needed is kept in every respect: the record of the node folder
    it was laid out in stays too."""
    store = Store(str(tmp_path / "store"), create=True)
    orphan = sealed(store, tmp_path, 0)
    record = store.layout.layout_record(orphan)
    store.backend.put(record, canonical_json({"manifest": orphan, "root": str(tmp_path)}))

    report = gc_racing_a_move_to(store, orphan)
    assert report.restored == [orphan]
    assert "layouts" not in report.deleted and store.backend.exists(record)


@pytest.mark.parametrize("record", [b"[]", b"not json", b'{"root":5}'])
def test_an_unreadable_layout_record_of_a_dead_manifest_is_swept_without_a_traceback(
    tmp_path: Path, record: bytes
) -> None:
    """A layout record is store data: one of the wrong shape goes with its manifest, and gc
    removes no folder for it."""
    store = Store(str(tmp_path / "store"), create=True)
    dead = "sha256:" + "e" * 64
    store.backend.put(store.layout.layout_record(dead), record)
    report = collect_garbage(store, now=LATER)
    assert report.deleted["layouts"] == [store.layout.layout_record(dead)]
