"""``neuronbuild gc``: mark and sweep a store.

Live: every manifest a ref points at or pointed at (its last ``keep_last`` moves; all when None),
their unit records and blobs; and every unit record, blob, manifest or temporary object younger
than the grace period, so that shards still being published (blobs before their unit record, unit
records before their manifest) survive. Everything else is deleted: manifests first, then unit
records, then blobs, so no manifest is ever left pointing at swept blobs. On S3, multipart uploads
abandoned before the grace period (a publisher killed mid-upload) are aborted too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from neuronbuild.store import Store, parse_ref

DAY = 86400.0


@dataclass
class GcReport:
    """What was (or, in a dry run, would be) deleted, by kind, and the bytes freed."""

    dry_run: bool
    live_manifests: int = 0
    deleted: dict[str, list[str]] = field(default_factory=dict)
    bytes: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "dry_run": self.dry_run,
            "live_manifests": self.live_manifests,
            "deleted": {kind: len(paths) for kind, paths in self.deleted.items()},
            "bytes": self.bytes,
            "paths": self.deleted,
        }


def collect_garbage(
    store: Store,
    *,
    keep_last: int | None = None,
    older_than_days: float = 1.0,
    dry_run: bool = False,
    now: float | None = None,
) -> GcReport:
    """Sweep what no ref (or ref history within ``keep_last`` moves) reaches and is older than
    ``older_than_days`` (days; the grace period).

    Raises:
        StoreError: the store failed; what was already deleted stays deleted, nothing live is.
    """
    now = time.time() if now is None else now
    cutoff = now - older_than_days * DAY
    report = GcReport(dry_run)

    live: set[str] = set()
    for ref, digest in store.refs().items():
        live.add(digest)
        moves = store.ref_history(*parse_ref(ref))
        recent = moves if keep_last is None else moves[-keep_last:] if keep_last else []
        live.update(m["manifest"] for m in recent)

    def old(path: str) -> bool:
        modified = store.storage.modified(path)
        return modified is not None and modified < cutoff

    def name_of(path: str) -> str:
        return path.rsplit("/", 1)[-1].removesuffix(".json")

    # Every manifest that stays (reached by a ref, or young) keeps its units and blobs alive.
    sweeps = []
    kept: set[str] = set()
    for path in store.storage.find(store._path("manifests")):
        digest = "sha256:" + name_of(path)
        if digest in live or not old(path):
            kept.add(digest)
        else:
            sweeps.append(("manifests", path))
    live_units: set[str] = set()
    live_blobs: set[str] = set()
    for digest in sorted(kept):
        # A StoreError or malformed manifest aborts the sweep: nothing is deleted on a guess.
        manifest = store.get_manifest(digest)
        report.live_manifests += digest in live
        live_units.update(u.key.split(":", 1)[1] for u in manifest.units)
        live_blobs.update(f.digest.split(":", 1)[1] for f in manifest.files())
    for path in store.storage.find(store._path("units")):
        if name_of(path) in live_units:
            continue
        if old(path):
            sweeps.append(("units", path))
        else:  # a young record (an unsealed shard) keeps its blobs
            record = store.get_unit("sha256:" + name_of(path))
            if record is not None:
                live_blobs.update(f.digest.split(":", 1)[1] for f in record.files)
    for path in store.storage.find(store._path("blobs")):
        if name_of(path) not in live_blobs and old(path):
            sweeps.append(("blobs", path))
    for path in store.storage.find(store._path("tmp")):
        if old(path):
            sweeps.append(("tmp", path))

    uploads = store.storage.abort_abandoned_uploads(cutoff, dry_run)
    if uploads:
        report.deleted["multipart uploads"] = uploads
    for kind, path in sweeps:
        report.deleted.setdefault(kind, []).append(path)
        if kind == "blobs":
            report.bytes += store.storage.size(path) or 0
        if not dry_run:
            store.storage.delete(path)
    return report
