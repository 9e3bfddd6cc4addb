"""Copy one manifest and everything it references between two stores (``push``, ``pull``, a
local tier's read-through and write-through).

Copies in publish order (blobs the target lacks, unit records, the manifest), so an interrupted
copy leaves the target consistent, and a rerun resumes: blobs already present are skipped. Every
blob is verified against its digest on the way; with ``recheck``, so are the blobs and the
manifest the target already holds (a local tier never reports success it cannot back).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from neuronbuild.digest import hex_of
from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.human import size
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord

DISK_MARGIN_BYTES = 64 << 20
"""Free space (bytes) a pull keeps beyond what the blobs need."""


class ByteMeter(Protocol):
    """What a copy tells about the bytes it moves: :meth:`advance` from any of its threads,
    :meth:`close` once when the blobs are copied (or the copy failed)."""

    def advance(self, n_bytes: int) -> None: ...

    def close(self) -> None: ...


MeterFactory = Callable[[str, int, int], ByteMeter]
"""``factory(what, total_bytes, n_blobs)``: a meter for one copy of ``n_blobs`` blobs of
``total_bytes`` bytes, named ``what`` (``push``, ``pull``, ``fetch``). The command line's is
:class:`~neuronbuild.ui.progress.ByteProgress` on stderr; the store never prints."""


@dataclass(frozen=True)
class CopyReport:
    """What a copy did: blobs copied and skipped, bytes moved, and notes (e.g. a corrupt copy
    in the target that was replaced), for the CLI to print."""

    manifest: str
    copied: int
    skipped: int
    bytes: int
    notes: tuple[str, ...] = field(default=())

    def to_json(self) -> dict[str, object]:
        """What ``push`` and ``pull --json`` print of a copy (``bytes``: those copied)."""
        return {
            "manifest": self.manifest,
            "n_blobs_copied": self.copied,
            "n_blobs_present": self.skipped,
            "bytes": self.bytes,
            "notes": list(self.notes),
        }


def check_free_space(store: Store, needed: int) -> None:
    """Raise UserError when the folder store lacks ``needed`` bytes (plus a margin)."""
    if not store.is_folder:
        return
    free = shutil.disk_usage(store.root).free
    if free < needed + DISK_MARGIN_BYTES:
        raise UserError(
            f"{store.url}: {size(needed)} of blobs to fetch but only {size(free)} free (keeping "
            f"{size(DISK_MARGIN_BYTES)} spare); free space or pick another --local-cache"
        )


def scratch_folder(dst: Store) -> tempfile.TemporaryDirectory[str]:
    """A temporary local folder for verified copies: in the target's ``tmp/`` when it is a
    folder (so a verified blob is renamed into place, not copied twice), else the system's."""
    parent = None
    if dst.is_folder:
        parent = Path(dst.layout.tmp(""))
        parent.mkdir(parents=True, exist_ok=True)
    return tempfile.TemporaryDirectory(dir=parent, prefix="copy-")


def copy_blob(
    src: Store,
    dst: Store,
    file: FileRecord,
    scratch: Path,
    on_bytes: Callable[[int], None] | None = None,
) -> None:
    """Copy one blob, verified, through a temporary file in the local folder ``scratch``.

    ``on_bytes`` is told the bytes moved on the slow leg: the fetch into a folder ``dst`` (the
    file is then renamed into place), else the upload to ``dst``.
    """
    tmp = scratch / f"{hex_of(file.digest)}.{uuid.uuid4().hex[:8]}"
    fetched, uploaded = (on_bytes, None) if dst.is_folder else (None, on_bytes)
    try:
        src.fetch_blob(file, tmp, fetched)  # hashed on the way: only verified bytes reach ``dst``
        dst.put_verified(tmp, file, uploaded)
    finally:
        tmp.unlink(missing_ok=True)


def copy_manifest(
    src: Store,
    dst: Store,
    digest: str,
    *,
    jobs: int = 8,
    recheck: bool = False,
    progress: MeterFactory | None = None,
    what: str = "copy",
) -> CopyReport:
    """Copy manifest ``digest`` with its unit records and blobs from ``src`` to ``dst``.

    ``recheck``: re-hash the blobs ``dst`` already holds and re-read its copy of the manifest;
    a corrupt one is replaced from ``src`` (and noted). ``progress``: makes the meter told the
    bytes the blobs' copy moves, named ``what`` (:data:`MeterFactory`; called only when blobs
    are missing); None tells nobody.

    Raises:
        UserError: no such manifest, or not enough disk space on a folder ``dst``.
        StoreDataInvalid: a blob in ``src`` is corrupt or a record malformed; nothing of it is
            written to ``dst``.
        StoreError: either store failed after retries.
    """
    manifest = src.get_manifest(digest)
    notes: list[str] = []
    files = manifest.blobs()
    missing = dst.missing_blobs(files)
    if recheck:
        held = [e for e in files if e not in missing]
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            problems = list(pool.map(dst.check_blob, held))
        for file, problem in zip(held, problems, strict=True):
            if problem is not None:
                notes.append(f"{problem}; fetching it again from {src.url}")
                dst.delete_blob(file)
                missing.append(file)
        if dst.has_manifest(digest):
            try:
                dst.get_manifest(digest)
            except StoreDataInvalid as exc:
                notes.append(f"{exc}; replacing it with the copy of {src.url}")
                dst.delete_manifest(digest)
    check_free_space(dst, sum(e.size for e in missing))
    meter = None
    if progress is not None and missing:
        meter = progress(what, sum(e.size for e in missing), len(missing))
    on_bytes = meter.advance if meter is not None else None
    try:
        with scratch_folder(dst) as scratch, ThreadPoolExecutor(max(1, jobs)) as pool:
            list(pool.map(lambda e: copy_blob(src, dst, e, Path(scratch), on_bytes), missing))
    finally:
        if meter is not None:
            meter.close()
    for unit in manifest.units:
        dst.put_unit(unit)
    dst.put_manifest(manifest)
    return CopyReport(
        digest,
        len(missing),
        len(files) - len(missing),
        sum(e.size for e in missing),
        tuple(notes),
    )
