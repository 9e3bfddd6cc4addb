"""gc's sweep, pinned one claim at a time (issue 46 item 18): nothing younger than the grace period
is swept, whatever its kind (a manifest no ref names yet, a blob no unit record names yet, a
timing, an attestation or an addition whose owner is gone, a history entry of a move in flight);
a manifest a racing move needs is kept with its attestations and additions; another gc run's
fresh condemned marker is never taken for a temporary file, even at ``--older-than 0``; and a dry
run lists an expired lease without deleting it. Each test fails when the check that carries its
claim in ``neuronbuild/store/gc.py`` is removed or inverted (``tests/claim_breaks.py``)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from neuronbuild.digest import sha256_digest
from neuronbuild.orchestrate.verify import verify_manifest
from neuronbuild.store.cas import CONDEMNED_SECONDS, Store
from neuronbuild.store.gc import collect_garbage
from neuronbuild.store.records import RefMove, UnitTiming
from tests.store.test_additions import added
from tests.store.test_claims_gc import LATER, gc_racing_a_move_to, moved_through, sealed

GONE = "sha256:" + "d" * 64
"""A manifest (or unit key) the store does not hold: the owner of an object swept with it."""
KEYID = "c" * 64
SHAPE = "sha256:" + "5" * 64


def young(path: str) -> str:
    """``path``, made young at :data:`LATER` (written just before gc runs then)."""
    os.utime(path, (LATER, LATER))
    return path


def test_a_manifest_no_ref_names_yet_stays_through_the_grace_period_with_what_it_uses(
    tmp_path: Path,
) -> None:
    """A build sealed moments ago, its ref not yet moved (``compile`` seals, then moves), is
    complete when the move comes, though its unit records and blobs were published days ago."""
    store = Store(str(tmp_path / "store"), create=True)
    fresh = sealed(store, tmp_path, 0)
    young(store.layout.manifest(fresh))
    report = collect_garbage(store, now=LATER)
    assert report.deleted == {}
    assert not verify_manifest(store, fresh, deep=True).problems
    store.move_ref("app", "latest", fresh, None)


def test_a_blob_no_unit_record_names_yet_stays_through_the_grace_period(tmp_path: Path) -> None:
    """Blobs are published before their unit record: a young one nothing names is a shard still
    being published, and stays; an old one nothing names goes."""
    store = Store(str(tmp_path / "store"), create=True)
    paths = {}
    for name in ("uploading", "abandoned"):
        (tmp_path / name).write_bytes(f"{name} shard".encode())
        digest, _ = store.put_file(tmp_path / name)
        paths[name] = store.layout.blob(digest)
    young(paths["uploading"])
    report = collect_garbage(store, now=LATER)
    assert report.deleted == {"blobs": [paths["abandoned"]]}
    assert store.backend.exists(paths["uploading"])


def test_a_young_timing_attestation_or_addition_whose_owner_is_gone_stays(tmp_path: Path) -> None:
    """The grace period covers every kind: a timing of a unit record not in the store, an
    attestation and an addition of a manifest not in the store (a writer racing gc checked its
    owner, then wrote) stay while young; their old counterparts go."""
    store = Store(str(tmp_path / "store"), create=True)

    def orphans(owner: str, tag: str) -> dict[str, str]:
        timing = UnitTiming(owner, SHAPE, 12.5)
        store.put_timing(timing)
        paths = {
            "timings": store.layout.timing(SHAPE, owner),
            "attestations": store.layout.attestation(owner, KEYID),
            "additions": store.layout.addition(owner, sha256_digest(tag.encode())),
        }
        store.backend.put(paths["attestations"], b"{}")
        store.backend.put(paths["additions"], b"{}")
        return paths

    old = orphans(GONE, "old")
    fresh = {kind: young(path) for kind, path in orphans("sha256:" + "e" * 64, "new").items()}
    report = collect_garbage(store, now=LATER)
    assert report.deleted == {kind: [path] for kind, path in old.items()}
    assert all(store.backend.exists(path) for path in fresh.values())


def test_a_young_history_entry_off_the_chain_stays_and_an_old_one_goes(tmp_path: Path) -> None:
    """An entry off the ref's chain is a move that never happened only once it is old: a young
    one is a move still in flight (its intent written, its swap to come)."""
    store = Store(str(tmp_path / "store"), create=True)
    _, second = moved_through(store, tmp_path, 2)
    entries = {}
    for when, digest in ((1, GONE), (2, "sha256:" + "f" * 64)):
        path = store.layout.history_entry("app", "latest", time.time_ns() + when, digest)
        store.backend.create(path, RefMove(time.time(), digest, second).to_bytes())
        entries[when] = path
    young(entries[2])
    _, off_chain = store.ref_chain("app", "latest")
    assert sorted(off_chain) == sorted(entries.values())
    report = collect_garbage(store, now=LATER)
    assert report.deleted == {"history": [entries[1]]}
    assert store.backend.exists(entries[2])


def test_a_raced_manifest_put_back_keeps_its_attestations_and_additions(tmp_path: Path) -> None:
    """The manifest a racing move needed is kept in every respect: its signatures (a node under a
    trust policy refuses it without them) and the additions nodes gave back stay, with their
    blobs."""
    store = Store(str(tmp_path / "store"), create=True)
    orphan = sealed(store, tmp_path, 0)
    store.put_attestation(orphan, KEYID, b"{}")
    name, trace = added(store, tmp_path, orphan, b"a trace of the raced build")

    report = gc_racing_a_move_to(store, orphan)
    assert report.restored == [orphan]
    assert report.deleted == {}
    assert store.backend.exists(store.layout.attestation(orphan, KEYID))
    assert list(store.get_additions(orphan)) == [name]
    assert store.check_blob(trace) is None


def test_another_runs_fresh_condemned_marker_survives_a_gc_with_no_grace_period(
    tmp_path: Path,
) -> None:
    """Another gc run (``--keep-last 0``) has condemned an earlier move's manifest and is about to
    delete it; this run (every move kept, ``--older-than 0``) keeps that manifest but must leave
    the marker, which holds a rollback off the manifest until the other run is done."""
    store = Store(str(tmp_path / "store"), create=True)
    earlier, _ = moved_through(store, tmp_path, 2)
    marker = store.layout.condemned(earlier, "0123abcd")
    store.backend.put(marker, b"")
    report = collect_garbage(store, older_than_days=0)
    assert "tmp" not in report.deleted and "manifests" not in report.deleted
    assert store.backend.exists(marker)


def test_a_stale_condemned_marker_is_listed_once(tmp_path: Path) -> None:
    """A killed run's marker, past its hour, goes once: it is a temporary file too, so the
    temporary-file sweep leaves markers to the marker sweep (a dry run, which deletes neither,
    listed it twice)."""
    store = Store(str(tmp_path / "store"), create=True)
    earlier, _ = moved_through(store, tmp_path, 2)
    marker = store.layout.condemned(earlier, "0123abcd")
    store.backend.put(marker, b"")
    later = time.time() + CONDEMNED_SECONDS + 60
    for dry_run in (True, False):
        report = collect_garbage(store, older_than_days=0, now=later, dry_run=dry_run)
        assert report.deleted.get("tmp") == [marker]


def test_a_dry_run_lists_an_expired_lease_and_leaves_it(tmp_path: Path) -> None:
    """``gc --dry-run`` deletes nothing, a dead builder's lease included; ``gc`` then deletes
    it."""
    store = Store(str(tmp_path / "store"), create=True)
    lease = Path(store.layout.lease(GONE))
    lease.parent.mkdir(parents=True, exist_ok=True)
    lease.write_text(
        json.dumps({"owner": {"host": "gone", "pid": 4242, "token": "t0"}, "taken": 0})
    )
    os.utime(lease, (time.time() - 600, time.time() - 600))
    assert collect_garbage(store, dry_run=True).deleted == {"leases": [str(lease)]}
    assert lease.exists()
    assert collect_garbage(store).deleted == {"leases": [str(lease)]}
    assert not lease.exists()
