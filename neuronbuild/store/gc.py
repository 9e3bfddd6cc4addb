"""``neuronbuild gc``: mark and sweep every kind of object a store holds.

Live: every manifest a ref points at or pointed at (its last ``keep_last`` moves; all when None),
or that an index such a ref names lists, their unit records and blobs; every unit record, blob,
manifest, index or temporary object younger than the grace period, so that shards still being
published (blobs before their unit record, unit records before their manifest) survive; and the
unit records and blobs of young unit records.
Ages are read off the store's clock (the modification time of a probe object gc writes), never
this host's: a gc host whose clock runs days ahead sweeps nothing younger than the grace period.

Racing writers and kills: a ref move writes its history entry (its intent), then refuses a
manifest some gc run has condemned, or one that is missing, then swaps the ref
(:meth:`~neuronbuild.store.cas.Store.move_ref`). gc, after its mark, (1) writes a condemned
marker per manifest it means to delete (``tmp/condemned/<manifest>/<run>``), (2) re-reads every
intent younger than :data:`~neuronbuild.store.cas.CONDEMNED_SECONDS` (wherever it sits in its
ref's chain) and then every ref, and spares the manifests they name, (3) deletes
the rest, (4) then removes its markers. A mover either wrote its intent before (2), and gc spares
its manifest, or checks after (1), and sees the marker, or after (3), and sees the manifest gone.
No manifest is deleted before its marker is durable, so a gc killed anywhere leaves every ref on
a manifest that exists; its leftover markers stop moves to their manifests for at most
:data:`~neuronbuild.store.cas.CONDEMNED_SECONDS` (a run stopped by an error or a signal
removes its own), and a later run removes them once stale or once their manifest is gone. Then unit
records, blobs, attestations of manifests no longer kept, expired unit leases, temporary files,
stale locks, history entries of moves that never happened, and node layouts of dead manifests are
swept. On S3, multipart uploads abandoned
before the grace period (a publisher killed mid-upload) are aborted too. Temporary objects, locks
and multipart uploads younger than :data:`IN_FLIGHT_SECONDS` stay whatever the grace period: a
live writer holds them.
"""

from __future__ import annotations

import contextlib
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from neuronbuild import envs
from neuronbuild.digest import canonical_json, hex_of, parse_canonical
from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.store.cas import CONDEMNED_SECONDS, Store, store_now
from neuronbuild.store.layout import (
    MAX_ATTESTATION_BYTES,
    MAX_RECORD_BYTES,
    MAX_SMALL_BYTES,
    parse_ref,
)
from neuronbuild.store.leases import expired_leases
from neuronbuild.store.records import RefMove

DAY = 86400.0
IN_FLIGHT_SECONDS = 3600.0
"""Temporary objects (``tmp/``: a folder store's ``.part`` files, clock and write probes) and
lock files younger than this (seconds, store clock) are never swept, whatever the grace period:
a live writer holds them (a ``.part`` file being written keeps a fresh time), and a
``gc --older-than 0`` beside a running compile must not pull them from under it."""

KIND_NOUNS = {
    "blobs": ("blob",),
    "units": ("unit record",),
    "manifests": ("manifest",),
    "indexes": ("index", "indexes"),
    "history": ("ref history entry", "ref history entries"),
    "attestations": ("attestation",),
    "additions": ("addition",),
    "probes": ("probe record",),
    "receipts": ("receipt",),
    "layouts": ("node layout record",),
    "tmp": ("temporary file",),
    "locks": ("stale lock",),
    "timings": ("unit timing",),
    "leases": ("expired lease",),
    "multipart uploads": ("abandoned multipart upload",),
}
"""What ``gc`` says for each store folder it sweeps (its JSON keeps the folder names)."""


@dataclass
class GcReport:
    """What was (or, in a dry run, would be) deleted, by kind, and the bytes freed; manifests gc
    meant to delete and spared because a racing ref move named them (``restored``)."""

    dry_run: bool
    live_manifests: int = 0
    deleted: dict[str, list[str]] = field(default_factory=dict)
    bytes: int = 0
    restored: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """``gc --json`` less its ``store`` (``neuronbuild/schemas/gc.json``): ``deleted`` lists
        paths by kind, ``n_deleted_by_kind`` counts them, ``bytes`` is the blobs' total."""
        return {
            "dry_run": self.dry_run,
            "n_live_manifests": self.live_manifests,
            "n_deleted_by_kind": {kind: len(paths) for kind, paths in self.deleted.items()},
            "bytes": self.bytes,
            "restored": self.restored,
            "deleted": self.deleted,
        }


class _Sweep:
    """One gc run's view of a store: what is old, and deletions recorded in the report."""

    def __init__(self, store: Store, now: float, grace: float, report: GcReport) -> None:
        self.store, self.now, self.cutoff, self.report = store, now, now - grace, report
        self.superseded: set[str] = set()
        """Additions a newer one of the same kind and node identity replaces (:meth:`added`)."""

    def old(self, path: str, in_flight: bool = False) -> bool:
        """Older than the grace period; ``in_flight``: a temporary or lock file, which must
        also be older than :data:`IN_FLIGHT_SECONDS`."""
        modified = self.store.backend.modified(path)
        cutoff = self.in_flight_cutoff if in_flight else self.cutoff
        return modified is not None and modified < cutoff

    @property
    def in_flight_cutoff(self) -> float:
        """Seconds since the epoch before which a temporary object is no longer in flight."""
        return min(self.cutoff, self.now - IN_FLIGHT_SECONDS)

    def delete(self, kind: str, path: str) -> None:
        self.report.deleted.setdefault(kind, []).append(path)
        if kind == "blobs":
            self.report.bytes += self.store.backend.size(path) or 0
        if not self.report.dry_run:
            self.store.backend.delete(path)

    def uses(self, digests: set[str]) -> tuple[set[str], set[str]]:
        """Unit keys and blob digests the manifests ``digests`` use (a StoreError or a
        malformed manifest aborts the run: nothing is deleted on a guess)."""
        units: set[str] = set()
        blobs: set[str] = set()
        for digest in sorted(digests):
            manifest = self.store.get_manifest(digest)
            units.update(u.key for u in manifest.units)
            blobs.update(f.digest for f in manifest.files())
            blobs.update(self.added(digest))
        return units, blobs

    def added(self, manifest: str) -> set[str]:
        """The blobs of the additions of ``manifest`` (:mod:`neuronbuild.store.additions`) that
        stay: of each kind, node identity (target, installed builds) and set of signers only
        the newest, the one a node of that identity lays out; older ones go to
        :attr:`superseded`. Read past the limit a reader takes, so that a store over it is
        brought back under it. A malformed one is never laid out: its blobs are not kept."""
        from neuronbuild.store.additions import read_addition

        newest: dict[str, tuple[tuple[str, str], str, frozenset[str]]] = {}
        for path in self.store.backend.find(self.store.layout.additions(manifest)):
            named = self.store.layout.addition_of(path)
            try:
                data = self.store.backend.read(path, MAX_ATTESTATION_BYTES)
                if named is None or named[0] != manifest or data is None:
                    continue
                addition = read_addition(data, path, manifest, named[1])
            except StoreDataInvalid:
                continue
            node = addition.node
            signers = sorted(addition.keyids)  # an unsigned one never replaces a signed one
            identity = canonical_json([addition.kind, node.target, node.installed, signers])
            identity_text = identity.decode()
            entry = (
                (node.captured, addition.name),
                path,
                frozenset(f.digest for f in addition.files),
            )
            if identity_text in newest and newest[identity_text][0] > entry[0]:
                self.superseded.add(path)
                continue
            if identity_text in newest:
                self.superseded.add(newest[identity_text][1])
            newest[identity_text] = entry
        return {digest for _, _, blobs in newest.values() for digest in blobs}


def in_flight(store: Store, since: float) -> set[str]:
    """Manifests a ref move may be about to point a ref at: those named by any history entry
    written at or after ``since`` (seconds, store time), wherever it sits in its ref's chain (a
    move not yet swapped may name a manifest further back: a rollback), then by every ref. Read
    in that order, so a swap between the two reads is seen by one of them."""
    prefix = store.layout.folder("history")
    times = store.backend.list_modified(prefix)
    young = [path for path, when in times.items() if when is None or when >= since]
    named = set()
    for path in young:
        data = store.backend.read(path, MAX_SMALL_BYTES)
        if data is not None:
            named.add(RefMove.from_bytes(data, f"{store.url}: ref history {path}").manifest)
    return with_entries(store, named | set(store.refs().values()))


def with_entries(store: Store, digests: set[str]) -> set[str]:
    """``digests`` and, for each that names an index, every entry's manifest (a ref on an index
    keeps its builds: :mod:`neuronbuild.store.index`). A malformed index aborts the run."""
    out = set(digests)
    for digest in sorted(digests):
        if store.is_index(digest):
            out.update(store.get_index(digest).manifests())
    return out


def collect_garbage(
    store: Store,
    *,
    keep_last: int | None = None,
    older_than_days: float = 1.0,
    dry_run: bool = False,
    now: float | None = None,
    at_step: Callable[[str], None] | None = None,
) -> GcReport:
    """Sweep what no ref (or ref history within ``keep_last`` moves) reaches and is older than
    ``older_than_days`` (days; the grace period), by the store's clock (:func:`store_now`;
    ``now``, seconds since the epoch, stands in for it where given: tests age a store so).
    ``at_step`` is told each step as it is reached (``marked``, ``condemned``, ``spared``,
    ``deleted``, ``swept``): tests hold or kill gc there while writers race it.

    Raises:
        StoreError: the store failed; what was already deleted stays deleted, nothing live is.
    """
    step = at_step or (lambda _: None)
    now = store_now(store, dry_run=dry_run) if now is None else now
    report = GcReport(dry_run)
    sweep = _Sweep(store, now, older_than_days * DAY, report)
    layout = store.layout

    # Mark.
    refs = store.refs()
    live: set[str] = set(refs.values())
    for ref in refs:
        moves = store.ref_history(*parse_ref(ref))
        recent = moves if keep_last is None else moves[-keep_last:] if keep_last else []
        live.update(m.manifest for m in recent)
    indexes = store.index_digests()
    doomed_indexes = [d for d in indexes if d not in live and sweep.old(layout.index(d))]
    live = with_entries(store, live)
    listed = store.manifest_digests()
    doomed = [d for d in listed if d not in live and sweep.old(layout.manifest(d))]
    report.live_manifests = len(live - set(indexes))
    doomed += doomed_indexes  # condemned and spared as manifests are; deleted as indexes
    step("marked")

    # Condemn, spare what racing moves name, then delete (see the module's docstring).
    run = uuid.uuid4().hex
    condemned_at = time.monotonic()  # before the first marker: the window counts from it
    try:
        if not dry_run:
            for digest in doomed:
                store.backend.put(layout.condemned(digest, run), b"")
        step("condemned")
        spared = in_flight(store, now - CONDEMNED_SECONDS) & set(doomed)
        for digest in sorted(spared):
            report.restored.append(digest)
            if not dry_run:
                store.backend.delete(layout.condemned(digest, run))
        step("spared")
        for digest in doomed:
            if digest in spared:
                continue
            if time.monotonic() - condemned_at > CONDEMNED_SECONDS / 2:
                spared.add(digest)  # its marker may no longer hold: the next run deletes it
                continue
            if digest in doomed_indexes:
                sweep.delete("indexes", layout.index(digest))
            else:
                sweep.delete("manifests", layout.manifest(digest))
    except BaseException:
        if not dry_run:  # a run that stops here frees the moves its markers hold off
            for digest in doomed:
                with contextlib.suppress(StoreError, UserError):
                    store.backend.delete(layout.condemned(digest, run))
        raise
    kept = (set(listed) | live) - set(doomed) | spared
    live_units, live_blobs = sweep.uses(kept & set(listed))
    step("deleted")
    for path in store.backend.find(layout.tmp("condemned")):
        marked = layout.condemned_of(path)
        # Another run's marker goes once its manifest is gone or the marker is stale, never
        # on this run's view of what is live (a run still going may be about to delete).
        gone = marked is None or (
            marked not in kept and not store.has_manifest(marked) and not store.is_index(marked)
        )
        stale = (store.backend.modified(path) or 0.0) < now - CONDEMNED_SECONDS
        if path.endswith("/" + run) or gone or stale:
            if not path.endswith("/" + run):
                report.deleted.setdefault("tmp", []).append(path)
            if not dry_run:
                store.backend.delete(path)

    # Sweep unit records and blobs that no kept manifest (nor a young unit record) uses.
    for path in store.backend.find(layout.folder("units")):
        key = layout.digest_of("units", path)
        if key in live_units:
            continue
        if sweep.old(path):
            sweep.delete("units", path)
        elif key is not None and (record := store.get_unit(key)) is not None:
            live_units.add(key)
            live_blobs.update(f.digest for f in record.files)  # an unsealed shard
    for path in store.backend.find(layout.folder("blobs")):
        if layout.digest_of("blobs", path) not in live_blobs and sweep.old(path):
            sweep.delete("blobs", path)

    # The store's other kinds. A timing goes with its unit: the kept units' timings still give
    # every shape its measured cost (neuronbuild.orchestrate.costs reads other keys' timings of a
    # shape).
    for path in store.backend.find(layout.folder("timings")):
        named = layout.timing_of(path)
        if (named is None or named[1] not in live_units) and sweep.old(path):
            sweep.delete("timings", path)
    for path, token in expired_leases(store, now).items():  # their builders died
        # Only the expired version: one another builder took over since stays.
        if dry_run or store.backend.delete_if(path, token):
            report.deleted.setdefault("leases", []).append(path)
    for path in store.backend.find(layout.folder("tmp")):
        if layout.condemned_of(path) is None and sweep.old(path, in_flight=True):
            sweep.delete("tmp", path)
    for path in store.backend.find(layout.folder("locks")):
        ref_path = path.removesuffix(".lock").replace(layout.folder("locks"), layout.root, 1)
        if not store.backend.exists(ref_path) and sweep.old(path, in_flight=True):
            sweep.delete("locks", path)
    for ref in refs:
        _, off_chain = store.ref_chain(*parse_ref(ref))
        for path in off_chain:
            if sweep.old(path):
                sweep.delete("history", path)
    # An attestation lives while its manifest does (issue 22), as do an addition, the probe
    # record and the receipts.
    for path in store.backend.find(layout.folder("attestations")):
        attested = layout.attestation_of(path)
        if (attested is None or attested[0] not in kept) and sweep.old(path):
            sweep.delete("attestations", path)
    for path in store.backend.find(layout.folder("additions")):
        added = layout.addition_of(path)
        gone = added is None or added[0] not in kept or path in sweep.superseded
        if gone and sweep.old(path):
            sweep.delete("additions", path)
    for path in store.backend.find(layout.folder("probes")):
        probed = layout.digest_of("probes", path)
        if (probed is None or probed not in kept) and sweep.old(path):
            sweep.delete("probes", path)
    for path in store.backend.find(layout.folder("receipts")):
        receipt = layout.receipt_of(path)
        if (receipt is None or receipt[0] not in kept) and sweep.old(path):
            sweep.delete("receipts", path)
    for path in store.backend.find(layout.folder("layouts")):
        laid_out = layout.digest_of("layouts", path)
        if laid_out is None or laid_out not in kept:
            folder = node_folder(store, path, laid_out)
            sweep.delete("layouts", path)
            if folder is not None and not dry_run:
                shutil.rmtree(folder, ignore_errors=True)

    uploads = store.backend.abort_abandoned_uploads(sweep.in_flight_cutoff, dry_run)
    if uploads:
        report.deleted["multipart uploads"] = uploads
    step("swept")
    return report


def node_folder(store: Store, record_path: str, manifest: str | None) -> Path | None:
    """The folder a layout record names, when ``serve`` chose it and it may go with the record:
    exactly the shape :func:`~neuronbuild.store.layout.node_layout_root` creates (the node's
    layouts folder / the manifest's first 16 hex digits), compared resolved. None for a folder
    the user named (their ``$VLLM_CACHE_ROOT``), which gc never removes, an unreadable record, or
    any other root: a record is store data, and a hostile one (``layouts/../../victim``) must
    never make gc delete outside the layouts folder."""
    if manifest is None:
        return None
    try:
        data = store.backend.read(record_path, MAX_RECORD_BYTES) or b""
        value = parse_canonical(data, record_path)
    except StoreDataInvalid:
        return None
    root = value.get("root") if isinstance(value, dict) else None
    if not isinstance(root, str):
        return None
    default = (envs.user_cache() / "layouts").resolve()
    expected = default / hex_of(manifest)[:16]
    # Path(root).resolve() follows "..", so a root that only looks as if it were inside fails here.
    return expected if Path(root).resolve() == expected else None
