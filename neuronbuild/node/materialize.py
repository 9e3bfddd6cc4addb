"""Lay a manifest's files out in a node-local folder for vLLM (its ``VLLM_CACHE_ROOT``).

Files are hard-linked from the local tier where the file system allows (a node then holds each
byte once) and copied, verified, elsewhere. Every file is checked against its digest before it is
laid out; then a stamp records each file's size, mtime and inode, so the next start on the same
node re-verifies cheaply from ``stat`` alone (``deep`` re-hashes). The local tier keeps a small
record of each folder it laid out (``layouts/``), which ``ls``, ``status`` and ``gc`` count and
sweep.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock

from neuronbuild import envs
from neuronbuild.digest import canonical_json, hash_file, parse_canonical
from neuronbuild.errors import NoRoom, StoreDataInvalid, StoreError, UserError
from neuronbuild.folders import boot_id
from neuronbuild.human import count
from neuronbuild.paths import inside
from neuronbuild.store.layout import IMAGE_STORE, MAX_RECORD_BYTES, NODE_STAMP
from neuronbuild.store.records import FileRecord, Manifest
from neuronbuild.store.tiered import TieredStore
from neuronbuild.store.transfer import blame

LAYOUT_ROOT = "layout root"
"""The role of the folder ``serve`` lays out in, as messages name it."""


@dataclass(frozen=True)
class LaidOut:
    """A manifest laid out under ``root``: files and bytes, how many were hard-linked, and
    whether the stamp alone re-verified it (``cheap``)."""

    root: Path
    files: int
    bytes: int
    linked: int
    cheap: bool


def check_apart(root: Path, tiers: TieredStore) -> None:
    """Refuse a layout root inside the root of a folder store of ``tiers`` (the local tier or
    a folder remote), or one holding such a store: its files would be taken for the store's
    (``gc`` lists them as strays) or the store's for its own. Both paths are compared with
    their symlinks resolved. The store a node image carries under its root
    (:data:`~neuronbuild.store.layout.IMAGE_STORE`) is the image's, not one apart.

    Raises:
        UserError: naming the layout root, the store and the fix (exit code 2).
    """
    where = root.resolve()
    for store in (tiers.local, tiers.remote):
        if store is None or not store.is_folder:
            continue
        home = Path(store.root).resolve()
        if home == where / IMAGE_STORE:  # a node image's own (its manifest): never written
            continue
        if where.is_relative_to(home) or home.is_relative_to(where):
            how = "is inside" if where.is_relative_to(home) else "holds"
            raise UserError(
                f"layout root {root} {how} the store {store.url}: lay out in a folder apart "
                "from every store (--vllm-cache-root, or $VLLM_CACHE_ROOT)"
            )


def _stat_of(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def read_stamp_value(root: Path) -> object | None:
    """The parsed stamp (:data:`NODE_STAMP`) under ``root``: serve's own or a node image's, at
    most :data:`MAX_RECORD_BYTES`; None when there is none, or it is too large or not canonical
    JSON (a stamp is a cache hint: a bad one means lay out again, never an error)."""
    stamp = root / NODE_STAMP
    try:
        if not stamp.is_file() or stamp.stat().st_size > MAX_RECORD_BYTES:
            return None
        value: object = parse_canonical(stamp.read_bytes(), str(stamp))
    except (OSError, StoreDataInvalid):
        return None
    return value


def _read_stamp(root: Path, digest: str) -> dict[str, list[int]] | None:
    """The files of ``root``'s stamp of ``digest``, written in this boot (a crash since may have
    lost bytes its files had: :func:`~neuronbuild.folders.boot_id`); else None."""
    value = read_stamp_value(root)
    if not isinstance(value, dict) or value.get("manifest") != digest:
        return None
    if value.get("boot") != boot_id():
        return None
    files = value.get("files")
    return files if isinstance(files, dict) else None


def _stamp_holds(root: Path, manifest: Manifest, stamp: dict[str, list[int]]) -> bool:
    """Whether every file is where the stamp saw it: same size, mtime and inode."""
    for file in manifest.files():
        dest = root / file.path
        try:
            if dest.is_symlink() or stamp.get(file.path) != _stat_of(dest):
                return False
        except OSError:
            return False
    return True


def laid_out(root: Path, manifest: Manifest, digest: str) -> bool:
    """Whether ``root`` holds a complete lay-out of ``manifest`` (``digest``) that its stamp
    re-verifies from ``stat`` alone: what :func:`lay_out` keeps without writing a byte."""
    stamp = _read_stamp(root, digest)
    return stamp is not None and _stamp_holds(root, manifest, stamp)


def _write_stamp(root: Path, manifest: Manifest, digest: str) -> None:
    files = {e.path: _stat_of(root / e.path) for e in manifest.files()}
    stamp = root / NODE_STAMP
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f".{stamp.name}.{uuid.uuid4().hex}.part")
    tmp.write_bytes(canonical_json({"manifest": digest, "files": files, "boot": boot_id()}))
    tmp.replace(stamp)


def _intact(dest: Path, file: FileRecord) -> bool:
    if dest.is_symlink() or not dest.is_file() or dest.stat().st_size != file.size:
        return False
    return hash_file(dest) == (file.digest, file.size)


def _link(tiers: TieredStore, file: FileRecord, dest: Path, deep: bool) -> bool:
    """Hard-link the local tier's verified blob to ``dest``; False where links cannot be made
    (another file system, a store this user may not link from). ``deep``: hash the blob even
    when this process verified it already (:meth:`~neuronbuild.store.cas.Store.check_blob`)."""
    blob = tiers.local.local_blob_path(file)
    if blob is None or (file.executable and not os.access(blob, os.X_OK)):
        return False  # a link shares its mode with the blob: an executable file gets a copy
    problem = tiers.local.check_blob(file, trust_verified=not deep)
    if problem is not None:
        tiers.fetch_blob(file, dest)  # fetches it again from the remote, noted
        return False
    tmp = dest.with_name(f".{dest.name[:200]}.{uuid.uuid4().hex}.link")
    try:
        os.link(blob, tmp)
        tmp.replace(dest)
    except OSError:
        tmp.unlink(missing_ok=True)
        return False
    return True


def place(tiers: TieredStore, root: Path, file: FileRecord, deep: bool) -> bool:
    """Lay one file out under ``root``, its blob verified: kept when intact, else linked from
    the local tier (True) or copied (False).

    Raises:
        StoreDataInvalid: the path escapes ``root``, or the blob is missing or corrupt in every
            tier. OSError: ``root`` cannot be written.
    """
    dest = inside(root, file.path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    linked = False
    if _intact(dest, file):
        pass
    elif _link(tiers, file, dest, deep):
        linked = True
    elif not _intact(dest, file):
        tiers.fetch_blob(file, dest)
    if file.executable and not os.access(dest, os.X_OK):
        if dest.stat().st_nlink > 1:
            # Kept from an earlier lay-out, hard-linked to the local tier's blob (and
            # maybe other lay-outs): chmod would change them all through the inode.
            tmp = dest.with_name(f".{dest.name[:200]}.{uuid.uuid4().hex}.copy")
            shutil.copyfile(dest, tmp)
            tmp.replace(dest)
        dest.chmod(dest.stat().st_mode | 0o111)
    return linked


def lay_out(
    manifest: Manifest,
    digest: str,
    tiers: TieredStore,
    root: Path,
    *,
    deep: bool = False,
    last: tuple[str, ...] = (),
    jobs: int = 8,
) -> LaidOut:
    """Lay every file of ``manifest`` out under ``root``, each verified against its digest.

    Files named in ``last`` (an engine's completion markers, e.g. vLLM-Neuron's
    ``.compilation_complete``) are laid out after all others, so an interrupted lay-out never
    leaves an entry that looks complete.

    A stamp left by an earlier lay-out whose sizes, mtimes and inodes still hold is enough
    unless ``deep``; otherwise a file already there with the right bytes is kept. ``jobs``
    blobs are verified and laid out at once, on threads (hashlib releases the GIL, so the
    hashing spreads over the cores); the files of one blob one after another. Files come
    from the local tier of ``tiers`` (linked or copied), which must hold every blob.

    Raises:
        UserError: ``root`` is inside a store of ``tiers``, or holds one (:func:`check_apart`),
            or this user may not write there.
        StoreDataInvalid: a blob is missing or corrupt in every tier, or a path escapes ``root``;
            nothing of that file is written.
        NoRoom: ``root`` (the layout root) or the local tier, fetching a blob again, is full,
            over quota or read-only; the message names which (exit code 3).
        StoreError: ``root`` cannot be written.
    """
    check_apart(root, tiers)
    files = manifest.files()
    total = sum(e.size for e in files)
    if not deep and laid_out(root, manifest, digest):
        return LaidOut(root, len(files), total, 0, True)
    missing = tiers.local.missing_blobs(files)
    if missing:
        names = ", ".join(f"{f.path} ({f.digest[:19]})" for f in missing[:3])
        raise StoreDataInvalid(
            f"manifest {digest} is incomplete in {tiers.local.url}: {count(len(missing), 'blob')} "
            f"missing, e.g. {names}; publish it again (neuronbuild compile) before serving"
        )
    lock = lay_out_lock(root)
    try:
        if not deep and laid_out(root, manifest, digest):  # another serve laid it out meanwhile
            return LaidOut(root, len(files), total, 0, True)
        root.mkdir(parents=True, exist_ok=True)
        if lock is not None:
            sweep_temporaries(root)
        (root / NODE_STAMP).unlink(missing_ok=True)
        linked = 0
        # One task per blob (its files one after another: a corrupt blob is fetched again
        # once); blobs apart hash apart, as hashlib releases the GIL. Markers come last.
        for batch in (False, True):
            tasks: dict[str, list[FileRecord]] = {}
            for file in files:
                if (PurePosixPath(file.path).name in last) == batch:
                    tasks.setdefault(file.digest, []).append(file)
            with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(tasks)))) as pool:
                linked += sum(
                    pool.map(
                        lambda same: sum(place(tiers, root, f, deep) for f in same), tasks.values()
                    )
                )
        _write_stamp(root, manifest, digest)
    except NoRoom as exc:  # a blob fetched into the layout root, or again into the local tier
        roles = {str(root): LAYOUT_ROOT, tiers.local.root: "local tier"}
        raise blame(exc, roles, LAYOUT_ROOT) from None
    except PermissionError as exc:
        raise UserError(
            f"cannot lay out under {root}: {exc.strerror}; pass --vllm-cache-root with a "
            "folder this user may write"
        ) from None
    except OSError as exc:
        if isinstance(exc, FileNotFoundError | NotADirectoryError | IsADirectoryError):
            raise StoreDataInvalid(f"cannot lay out under {root}: {exc}") from None
        room = NoRoom.of(exc, exc.filename or root, "cannot lay out")
        if room is not None:
            raise blame(room, {tiers.local.root: "local tier"}, LAYOUT_ROOT) from None
        raise StoreError(f"cannot lay out under {root}: {exc}") from None
    finally:
        if lock is not None:
            lock.release()
    return LaidOut(root, len(files), total, linked, False)


def lay_out_lock(root: Path) -> FileLock | None:
    """The lock of layout root ``root``, taken (filelock): held by the one process laying it out,
    so two serves of one root take turns and whatever temporary file the holder finds is a dead
    lay-out's. Kept in the node's user cache (``lay-outs-held/<hash of the resolved root>.lock``),
    never in the tree vLLM is given. None, and nothing swept, when that folder cannot be
    written."""
    folder = envs.user_cache() / "lay-outs-held"
    name = hashlib.sha256(str(root.resolve()).encode()).hexdigest()[:32]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = FileLock(folder / f"{name}.lock")
        lock.acquire()
    except OSError:
        return None
    return lock


TEMPORARY = re.compile(r"^\..*\.[0-9a-f]{32}\.(part|link|copy)$")
"""The names of a lay-out's temporary files (a blob being fetched, linked or copied into place,
the stamp being written): ``.<name>.<uuid hex>.<part|link|copy>``."""


def sweep_temporaries(root: Path) -> int:
    """Remove the temporary files (:data:`TEMPORARY`) a killed lay-out left under ``root``
    (call it holding :func:`lay_out_lock`); returns how many."""
    swept = 0
    for path in root.rglob(".*"):
        if TEMPORARY.match(path.name) and (path.is_file() or path.is_symlink()):
            path.unlink(missing_ok=True)
            swept += 1
    return swept


def register(tiers: TieredStore, digest: str, root: Path) -> None:
    """Record in the local tier that ``root`` holds manifest ``digest`` (for ``ls``, ``status``
    and ``gc``); skipped, with a note, when the local tier cannot be written."""
    try:
        tiers.local.put_layout_record(digest, str(root))
    except (StoreError, UserError, OSError) as exc:
        tiers.notes.append(f"{tiers.local.url}: layout of {digest[:19]} not recorded ({exc})")
