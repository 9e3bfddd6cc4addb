"""Copy one manifest and everything it references between two stores (``push``, ``pull``, a
local tier's read-through and write-through).

Copies in publish order (blobs the target lacks, unit records, the manifest), so an interrupted
copy leaves the target consistent, and a rerun resumes: blobs already present are skipped. Every
blob is verified against its digest on the way; with ``recheck`` (the default) so are the blobs
the target already holds, by their bytes or the SHA-256 the storage kept, never by size alone,
and the target's copy of the manifest always is. What the target holds is not written again, so a
read-only target that holds everything needs no write. A target that runs out of room (full,
over quota, read-only) is named with its role, exit code 3 (:class:`~neuronbuild.errors.NoRoom`).
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
from neuronbuild.errors import NoRoom, StoreDataInvalid, StoreError, UserError
from neuronbuild.human import size
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, UnitRecord

TEMPORARY = "temporary folder, $TMPDIR"
"""The role of the system's temporary folder, which a copy to a remote store goes through."""

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


def check_free_space(store: Store, needed: int, role: str) -> None:
    """Raise NoRoom when the folder store (``role`` to the command, e.g. ``local tier``) lacks
    ``needed`` bytes plus :data:`DISK_MARGIN_BYTES` (asked only when blobs are missing: a full
    tier that holds everything already is never refused)."""
    if not store.is_folder:
        return
    free = shutil.disk_usage(store.root).free
    if free < needed + DISK_MARGIN_BYTES:
        raise NoRoom(
            store.url,
            f"{size(needed)} of blobs to copy but only {size(free)} free (keeping "
            f"{size(DISK_MARGIN_BYTES)} spare)",
            role,
        )


def blame(exc: NoRoom, roles: dict[str, str], other: str) -> NoRoom:
    """``exc`` naming the folder of ``roles`` (folder -> its role) that holds its path, with
    that role, else ``other``: the one place that says which folder of a command ran out of
    room. A refusal that already names its role is kept."""
    if exc.role:
        return exc
    where = Path(exc.path).resolve()
    for folder, role in roles.items():
        if where.is_relative_to(Path(folder).resolve()):
            return NoRoom(folder, exc.why, role)
    return exc.as_role(other)


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


def unsound_held(dst: Store, held: list[FileRecord], jobs: int) -> list[tuple[FileRecord, str]]:
    """The blobs of ``held`` (present in ``dst`` with their recorded size) whose bytes do not
    hash to their digest, each with a one-line problem (:meth:`~.cas.Store.check_held`: S3's
    stored SHA-256, else the bytes read back)."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        problems = list(pool.map(dst.check_held, held))
    return [(f, p) for f, p in zip(held, problems, strict=True) if p is not None]


def holds_unit(dst: Store, unit: UnitRecord) -> bool:
    """Whether ``dst`` already holds a readable record for ``unit``'s key with every blob of it
    (the one a publish adopts), so nothing needs writing: a read-only tier is then enough."""
    try:
        stored = dst.get_unit(unit.key)
    except StoreDataInvalid:
        return False
    return stored is not None and not dst.missing_blobs(stored.files)


def copy_manifest(
    src: Store,
    dst: Store,
    digest: str,
    *,
    jobs: int = 8,
    recheck: bool = True,
    progress: MeterFactory | None = None,
    what: str = "copy",
    role: str = "destination store",
    additions: bool = True,
) -> CopyReport:
    """Copy manifest ``digest`` with its unit records and blobs from ``src`` to ``dst`` (an
    index: each entry's manifest so, then the index), and (``additions``) the additions nodes
    gave back to it (:func:`copy_additions`; serve's read-through leaves them: it fetches only
    the one it lays out).

    ``recheck``: re-hash the blobs ``dst`` already holds (:func:`unsound_held`) instead of
    trusting their size; a corrupt one is replaced from ``src`` (and noted). ``dst``'s copy of
    the manifest is always re-read and replaced when corrupt. What ``dst`` already holds is not
    written again, so a read-only ``dst`` that holds everything is copied into without a write.
    ``progress``: makes the meter told the bytes the blobs' copy moves, named ``what``
    (:data:`MeterFactory`; called only when blobs are missing); None tells nobody. ``role``:
    what ``dst`` is to the command (``destination store``, ``local tier``), named when it
    runs out of room.

    Raises:
        UserError: no such manifest.
        NoRoom: ``dst`` (or the temporary folder a copy to a remote store goes through) is
            full, over quota or read-only, or a folder ``dst`` lacks the free space the blobs
            need: exit code 3, naming the folder and its role.
        StoreDataInvalid: a blob in ``src`` is corrupt or a record malformed; nothing of it is
            written to ``dst``.
        StoreError: either store failed after retries.
    """
    if src.is_index(digest):  # every entry's build, then the index that names them
        index = src.get_index(digest)
        done = [
            copy_manifest(
                src,
                dst,
                entry,
                jobs=jobs,
                recheck=recheck,
                progress=progress,
                what=what,
                role=role,
                additions=additions,
            )
            for entry in index.manifests()
        ]
        if not dst.is_index(digest):
            dst.put_index(index)
        return CopyReport(
            digest,
            sum(r.copied for r in done),
            sum(r.skipped for r in done),
            sum(r.bytes for r in done),
            tuple(note for r in done for note in r.notes),
        )
    try:
        return _copy(src, dst, digest, jobs, recheck, progress, what, role, additions)
    except (NoRoom, OSError) as exc:  # OSError: making the scratch folder, before any store call
        room = exc if isinstance(exc, NoRoom) else NoRoom.of(exc, exc.filename or dst.root)
        if room is None:
            raise
        # A copy to a remote store goes through the system's temporary folder (scratch_folder).
        roles = {dst.root: role} if dst.is_folder else {tempfile.gettempdir(): TEMPORARY}
        raise blame(room, roles, TEMPORARY) from None


def _copy(
    src: Store,
    dst: Store,
    digest: str,
    jobs: int,
    recheck: bool,
    progress: MeterFactory | None,
    what: str,
    role: str,
    additions: bool,
) -> CopyReport:
    manifest = src.get_manifest(digest)
    notes: list[str] = []
    files = manifest.blobs()
    missing = dst.missing_blobs(files)
    if recheck:
        for file, problem in unsound_held(dst, [e for e in files if e not in missing], jobs):
            notes.append(f"{problem}; fetching it again from {src.url}")
            dst.delete_blob(file)
            missing.append(file)
    if dst.has_manifest(digest):
        try:
            dst.get_manifest(digest)
        except StoreDataInvalid as exc:
            notes.append(f"{exc}; replacing it with the copy of {src.url}")
            dst.delete_manifest(digest)
    if missing:
        _copy_blobs(src, dst, missing, jobs, progress, what, role)
    for unit in manifest.units:
        if not holds_unit(dst, unit):
            dst.put_unit(unit)
    if not dst.has_manifest(digest):
        dst.put_manifest(manifest)
    copy_attestations(src, dst, digest)
    notes += copy_probe(src, dst, digest)
    if additions:
        notes += copy_additions(src, dst, digest)
    return CopyReport(
        digest,
        len(missing),
        len(files) - len(missing),
        sum(e.size for e in missing),
        tuple(notes),
    )


def copy_attestations(src: Store, dst: Store, digest: str) -> int:
    """Copy the attestations of manifest ``digest`` that ``dst`` lacks (or holds other bytes
    of, or cannot read) from ``src``, after the manifest; returns how many were written. Their
    bytes travel as they are: every reader verifies them (:mod:`neuronbuild.attest`).

    Raises:
        StoreDataInvalid: ``src``'s attestations are hostile (see
            :meth:`~neuronbuild.store.cas.Store.get_attestations`); nothing of them is written.
    """
    wanted = src.get_attestations(digest)
    if not wanted:
        return 0
    try:
        held = dst.get_attestations(digest)
    except StoreDataInvalid:
        held = {}  # replaced below, as a corrupt manifest copy is
    written = 0
    for keyid, data in wanted.items():
        if held.get(keyid) != data:
            dst.put_attestation(digest, keyid, data)
            written += 1
    return written


def copy_probe(src: Store, dst: Store, digest: str) -> list[str]:
    """Copy the answers CI recorded for manifest ``digest`` (``neuronbuild probe --record``)
    when ``dst`` has none, so nodes of ``dst`` probe against them; other answers ``dst`` holds
    are kept, with a note (returned). The bytes travel as they are: ``probe`` parses them.

    Raises:
        StoreDataInvalid: ``src``'s record is over the size a reader takes.
    """
    data = src.get_probe(digest)
    if data is None:
        return []
    try:
        dst.put_probe(digest, data)
    except UserError:
        return [f"{dst.url} holds other answers recorded for {digest}; kept them"]
    return []


def copy_additions(src: Store, dst: Store, digest: str) -> list[str]:
    """Copy the additions of manifest ``digest`` (:mod:`neuronbuild.store.additions`) that
    ``dst`` lacks or holds other bytes of from ``src``, each after its blobs, so a pulled node
    lays them out offline. An addition is never what a copy is for: one that is malformed, names
    a blob ``src`` lacks or cannot be copied is skipped with a note (returned), and so are all
    of them when ``src`` holds more than a reader takes; the manifest's copy stands.

    Raises:
        NoRoom: ``dst`` is full (the node's condition, as for the manifest's blobs).
    """
    from neuronbuild.store.additions import read_addition

    try:
        wanted = src.get_additions(digest)
        held = dst.get_additions(digest) if wanted else {}
    except (StoreDataInvalid, StoreError) as exc:
        if isinstance(exc, NoRoom):
            raise
        return [f"{exc}; no addition copied"]
    notes = []
    for name, data in sorted(wanted.items()):
        if held.get(name) == data:
            continue
        try:
            addition = read_addition(data, f"{src.url}: addition {name}", digest, name)
            missing = dst.missing_blobs(addition.files)
            if missing:
                with scratch_folder(dst) as scratch:
                    for file in missing:
                        copy_blob(src, dst, file, Path(scratch))
            dst.put_addition(digest, name, data)
        except (StoreError, UserError) as exc:  # StoreDataInvalid is a UserError
            if isinstance(exc, NoRoom):
                raise
            notes.append(f"{exc}; addition not copied")
    return notes


def _copy_blobs(
    src: Store,
    dst: Store,
    missing: list[FileRecord],
    jobs: int,
    progress: MeterFactory | None,
    what: str,
    role: str,
) -> None:
    total = sum(e.size for e in missing)
    check_free_space(dst, total, role)
    meter = progress(what, total, len(missing)) if progress is not None else None
    on_bytes = meter.advance if meter is not None else None
    try:
        with scratch_folder(dst) as scratch, ThreadPoolExecutor(max(1, jobs)) as pool:
            list(pool.map(lambda e: copy_blob(src, dst, e, Path(scratch), on_bytes), missing))
    finally:
        if meter is not None:
            meter.close()
