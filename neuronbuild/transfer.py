"""Copy one manifest and everything it references between two stores (``push``, ``pull``).

Copies in publish order (blobs the target lacks, unit records, the manifest), so an interrupted
copy leaves the target consistent, and a rerun resumes: blobs already present are skipped.
Every blob is verified against its digest on the way.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from neuronbuild.errors import UserError
from neuronbuild.manifest import FileEntry, Manifest
from neuronbuild.store import Store

DISK_MARGIN_BYTES = 64 << 20
"""Free space (bytes) a pull keeps beyond what the blobs need."""


@dataclass(frozen=True)
class CopyReport:
    """What a copy did: blobs copied and skipped, bytes moved."""

    manifest: str
    copied: int
    skipped: int
    bytes: int

    def to_json(self) -> dict[str, object]:
        return {
            "manifest": self.manifest,
            "blobs_copied": self.copied,
            "blobs_present": self.skipped,
            "bytes": self.bytes,
        }


def check_free_space(store: Store, needed: int) -> None:
    """Raise UserError when the folder store lacks ``needed`` bytes (plus a margin)."""
    if not store.is_folder:
        return
    root = Path(store.root)
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    if free < needed + DISK_MARGIN_BYTES:
        raise UserError(
            f"{store.url}: {needed / 2**30:.2f} GiB of blobs to fetch but only "
            f"{free / 2**30:.2f} GiB free; free space or pick another --local-cache"
        )


def copy_blob(src: Store, dst: Store, entry: FileEntry, scratch: Path) -> None:
    """Copy one blob, verified, through a temporary file in the local folder ``scratch``."""
    scratch.mkdir(parents=True, exist_ok=True)
    tmp = scratch / f"{entry.digest.split(':', 1)[1]}.{uuid.uuid4().hex[:8]}"
    try:
        src.fetch_blob(entry, tmp)  # hashed on the way: only verified bytes reach ``dst``
        dst.put_verified(tmp, entry)
    finally:
        tmp.unlink(missing_ok=True)


def copy_manifest(src: Store, dst: Store, digest: str, *, jobs: int = 8) -> CopyReport:
    """Copy manifest ``digest`` with its unit records and blobs from ``src`` to ``dst``.

    Raises:
        UserError: no such manifest, or not enough disk space on a folder ``dst``.
        StoreDataInvalid: a blob in ``src`` is corrupt or a record malformed; nothing of it is
            written to ``dst``.
        StoreError: either store failed after retries.
    """
    manifest: Manifest = src.get_manifest(digest)
    entries = list({f.digest: f for f in manifest.files()}.values())
    missing = dst.missing_blobs(entries)
    check_free_space(dst, sum(e.size for e in missing))
    scratch_parent = Path(dst.root) / "tmp" if dst.is_folder else None
    if scratch_parent is not None:
        scratch_parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(dir=scratch_parent, prefix="copy-") as scratch,
        ThreadPoolExecutor(max_workers=max(1, jobs)) as pool,
    ):
        list(pool.map(lambda e: copy_blob(src, dst, e, Path(scratch)), missing))
    for unit in manifest.units:
        dst.put_unit(unit)
    dst.put_manifest(manifest)
    return CopyReport(
        digest, len(missing), len(entries) - len(missing), sum(e.size for e in missing)
    )
