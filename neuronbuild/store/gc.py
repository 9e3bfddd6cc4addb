"""``neuronbuild gc``: mark and sweep every kind of object a store holds.

Live: every manifest a ref points at or pointed at (its last ``keep_last`` moves; all when None),
their unit records and blobs; every unit record, blob, manifest or temporary object younger than
the grace period, so that shards still being published (blobs before their unit record, unit
records before their manifest) survive; and the unit records and blobs of young unit records.

Racing writers: a ref move writes its history entry before it checks that the manifest exists and
swaps the ref (:meth:`~neuronbuild.store.cas.Store.move_ref`). The sweep deletes manifests first,
keeping their bytes, then re-reads refs and every history entry written since the mark: a manifest
one of them names is put back before any unit record or blob is swept, and everything it uses is
marked live again. So a move either finds its manifest gone (and fails cleanly) or is seen by gc
and keeps it. Then unit records, blobs, temporary files, stale locks, history entries of moves
that never happened, and node layouts of dead manifests are swept. On S3, multipart uploads
abandoned before the grace period (a publisher killed mid-upload) are aborted too.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from neuronbuild import envs
from neuronbuild.digest import hex_of, parse_canonical
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store.cas import Store
from neuronbuild.store.layout import MAX_RECORD_BYTES, parse_ref

DAY = 86400.0

KIND_NOUNS = {
    "blobs": ("blob",),
    "units": ("unit record",),
    "manifests": ("manifest",),
    "history": ("ref history entry", "ref history entries"),
    "layouts": ("node layout record",),
    "tmp": ("temporary file",),
    "locks": ("stale lock",),
    "timings": ("unit timing",),
    "multipart uploads": ("abandoned multipart upload",),
}
"""What ``gc`` says for each store folder it sweeps (its JSON keeps the folder names)."""


@dataclass
class GcReport:
    """What was (or, in a dry run, would be) deleted, by kind, and the bytes freed; manifests a
    racing ref move needed and that were put back."""

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

    def __init__(self, store: Store, cutoff: float, report: GcReport) -> None:
        self.store, self.cutoff, self.report = store, cutoff, report

    def old(self, path: str) -> bool:
        modified = self.store.backend.modified(path)
        return modified is not None and modified < self.cutoff

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
        return units, blobs


def _history_paths(store: Store) -> set[str]:
    return set(store.backend.find(store.layout.folder("history")))


def collect_garbage(
    store: Store,
    *,
    keep_last: int | None = None,
    older_than_days: float = 1.0,
    dry_run: bool = False,
    now: float | None = None,
    after_mark: Callable[[], None] | None = None,
) -> GcReport:
    """Sweep what no ref (or ref history within ``keep_last`` moves) reaches and is older than
    ``older_than_days`` (days; the grace period). ``after_mark`` runs between mark and sweep
    (tests hold gc there while writers race it).

    Raises:
        StoreError: the store failed; what was already deleted stays deleted, nothing live is.
    """
    now = time.time() if now is None else now
    report = GcReport(dry_run)
    sweep = _Sweep(store, now - older_than_days * DAY, report)
    layout = store.layout

    # Mark.
    seen_history = _history_paths(store)
    refs = store.refs()
    live: set[str] = set(refs.values())
    for ref in refs:
        moves = store.ref_history(*parse_ref(ref))
        recent = moves if keep_last is None else moves[-keep_last:] if keep_last else []
        live.update(m.manifest for m in recent)
    listed = store.manifest_digests()
    doomed = [d for d in listed if d not in live and sweep.old(layout.manifest(d))]
    kept = (set(listed) | live) - set(doomed)
    live_units, live_blobs = sweep.uses({d for d in kept if d in listed})
    report.live_manifests = len(live)
    if after_mark is not None:
        after_mark()

    # Sweep manifests, keeping their bytes until racing ref moves have been looked at.
    saved: dict[str, bytes] = {}
    for digest in doomed:
        data = store.backend.read(layout.manifest(digest), MAX_RECORD_BYTES)
        if data is not None:
            saved[digest] = data
            sweep.delete("manifests", layout.manifest(digest))
    needed = set(store.refs().values())
    for path in _history_paths(store) - seen_history:
        needed.update(m.manifest for p, m in store.history_entries_at(path) if p == path)
    for digest in sorted(needed & set(saved)):
        report.restored.append(digest)
        report.deleted["manifests"].remove(layout.manifest(digest))
        kept.add(digest)
        if not dry_run:
            store.backend.create(layout.manifest(digest), saved[digest])
    restored_units, restored_blobs = sweep.uses(set(report.restored))
    live_units |= restored_units
    live_blobs |= restored_blobs

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
    # every shape its measured cost (neuronbuild.build.costs reads other keys' timings of a shape).
    for path in store.backend.find(layout.folder("timings")):
        named = layout.timing_of(path)
        if (named is None or named[1] not in live_units) and sweep.old(path):
            sweep.delete("timings", path)
    for path in store.backend.find(layout.folder("tmp")):
        if sweep.old(path):
            sweep.delete("tmp", path)
    for path in store.backend.find(layout.folder("locks")):
        ref_path = path.removesuffix(".lock").replace(layout.folder("locks"), layout.root, 1)
        if not store.backend.exists(ref_path) and sweep.old(path):
            sweep.delete("locks", path)
    for ref in refs:
        _, off_chain = store.ref_chain(*parse_ref(ref))
        for path in off_chain:
            if sweep.old(path):
                sweep.delete("history", path)
    for path in store.backend.find(layout.folder("layouts")):
        laid_out = layout.digest_of("layouts", path)
        if laid_out is None or laid_out not in kept:
            folder = node_folder(store, path, laid_out)
            sweep.delete("layouts", path)
            if folder is not None and not dry_run:
                shutil.rmtree(folder, ignore_errors=True)

    uploads = store.backend.abort_abandoned_uploads(sweep.cutoff, dry_run)
    if uploads:
        report.deleted["multipart uploads"] = uploads
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
