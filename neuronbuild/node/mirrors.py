"""The writable mirrors ``serve`` hands vLLM over a node image (:mod:`.image_stamp`), one per
server, so that no serve ever rebuilds a mirror under another's running vLLM.

vLLM writes beside its artifacts while it loads them, so it cannot be given the image's read-only
mount itself (:func:`link_files`). Each ``serve`` gets a mirror of its own under the image's
folder, ``<user cache>/layouts/<manifest hex, 16 digits>.image/``::

    run-<random>/        a server's mirror: symlinks into the image, inductor_cache/ copied
    run-<random>.lock    held (flock) by that server for as long as it runs
    kept/                what ``serve --layout-only`` prints a command for (reused while whole)
    .lock                taken while mirrors are made or removed (filelock)

The hold on ``run-<random>.lock`` is an open descriptor that passes through the exec into vLLM
(:meth:`Mirror.keep_through_exec`), so the kernel releases it when vLLM's server exits, however it
ends. Each ``serve`` from the image first removes the mirrors nobody holds (:func:`prune`): a crash
leaves at most one until the next serve. The ``kept`` mirror is never pruned, as a command
printed for later may use it; it is replaced (built beside, then renamed) only when it no longer
mirrors the image.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from filelock import FileLock

from neuronbuild import envs
from neuronbuild.digest import hex_of
from neuronbuild.paths import inside
from neuronbuild.store.records import Manifest

INDUCTOR_CACHE = "inductor_cache"
"""The folder of an AOT entry that torch's Inductor writes into as it loads it (vLLM 0.32)."""

RUN = "run-"
"""The name prefix of a server's own mirror (and, with ``.lock``, of its hold)."""

KEPT = "kept"
"""The mirror ``serve --layout-only`` lays out for a command run later."""


def mirrors_folder(digest: str) -> Path:
    """The folder of the mirrors of the node image of manifest ``digest``: ``<user
    cache>/layouts/<manifest hex, 16 digits>.image`` (node-local, writable, never a store)."""
    return envs.user_cache() / "layouts" / f"{hex_of(digest)[:16]}.image"


@dataclass
class Mirror:
    """A mirror at ``path``; ``hold``: the descriptor of its flock'd lock file (None for the
    :data:`KEPT` mirror, which nobody holds)."""

    path: Path
    hold: int | None = None

    def keep_through_exec(self) -> None:
        """Let the hold pass into the program this process execs (PEP 446 makes descriptors
        non-inheritable by default), so the mirror stays held while that program runs."""
        if self.hold is not None:
            os.set_inheritable(self.hold, True)

    def release(self) -> None:
        """Let the hold go (the next serve from the image removes the mirror)."""
        if self.hold is not None:
            os.close(self.hold)
            self.hold = None


def _held_elsewhere(lock: Path) -> tuple[bool, int | None]:
    """(whether another process holds ``lock``, the descriptor now holding it, if this one took
    it). A lock file that vanished is held by nobody."""
    try:
        fd = os.open(lock, os.O_RDWR)
    except FileNotFoundError:
        return False, None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return True, None
    return False, fd


def prune(folder: Path) -> list[str]:
    """Remove the server mirrors under ``folder`` that nobody holds (their server ended) and
    what a crash left half-made; return the names removed. The caller holds ``folder/.lock``.

    Raises:
        OSError: ``folder`` cannot be listed.
    """
    removed = []
    names = {p.name for p in folder.iterdir()}
    for name in sorted(names):
        if name.startswith(RUN) and name.endswith(".lock"):
            held, fd = _held_elsewhere(folder / name)
            if held:
                continue
            shutil.rmtree(folder / name.removesuffix(".lock"), ignore_errors=True)
            (folder / name).unlink(missing_ok=True)
            if fd is not None:
                os.close(fd)
            removed.append(name.removesuffix(".lock"))
        elif (name.startswith(RUN) and f"{name}.lock" not in names) or name.startswith(f"{KEPT}."):
            shutil.rmtree(folder / name, ignore_errors=True)  # made before its hold, or half-kept
            removed.append(name)
    return removed


def run_mirror(root: Path, manifest: Manifest, folder: Path) -> Mirror:
    """A new mirror of the image at ``root`` for one server, held by this process: the unheld
    mirrors are pruned first (:func:`prune`), then ``run-<random>.lock`` is made and locked
    before ``run-<random>/`` exists, so no prune can take a mirror being made.

    Raises:
        StoreDataInvalid: a manifest path escapes ``root`` or the mirror.
        OSError: ``folder`` cannot be written (the caller names the folder).
    """
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(folder / ".lock"):
        prune(folder)
        name = f"{RUN}{secrets.token_hex(8)}"
        fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        mirror = Mirror(folder / name, fd)
        mirror.path.mkdir()
    try:
        link_files(root, manifest, mirror.path)
    except BaseException:
        mirror.release()
        raise
    return mirror


def kept_mirror(root: Path, manifest: Manifest, folder: Path) -> Mirror:
    """The :data:`KEPT` mirror of the image at ``root``, as it is when it still mirrors it
    (:func:`mirrors`), else built anew beside it and renamed into its place.

    Raises:
        StoreDataInvalid: a manifest path escapes ``root`` or the mirror.
        OSError: ``folder`` cannot be written (the caller names the folder).
    """
    folder.mkdir(parents=True, exist_ok=True)
    kept = folder / KEPT
    with FileLock(folder / ".lock"):
        prune(folder)
        if not mirrors(kept, root, manifest):
            new = folder / f"{KEPT}.new-{secrets.token_hex(8)}"
            new.mkdir()
            link_files(root, manifest, new)
            if kept.exists() or kept.is_symlink():
                old = folder / f"{KEPT}.old-{secrets.token_hex(8)}"
                kept.rename(old)
                new.rename(kept)
                shutil.rmtree(old, ignore_errors=True)
            else:
                new.rename(kept)
    return Mirror(kept)


def mirrors(mirror: Path, root: Path, manifest: Manifest) -> bool:
    """Whether ``mirror`` still holds, for each file of ``manifest``, what :func:`link_files`
    makes: a symlink to the image's file, or (under :data:`INDUCTOR_CACHE`) a regular file of its
    size. Files vLLM added beside them do not count.

    Raises:
        StoreDataInvalid: a manifest path escapes ``root`` or ``mirror``.
    """
    try:
        for file in manifest.files():
            rel = PurePosixPath(file.path)
            source, dest = inside(root, file.path), inside(mirror, file.path)  # the link itself
            if INDUCTOR_CACHE in rel.parts:
                if dest.is_symlink() or dest.stat().st_size != file.size:
                    return False
            elif os.readlink(dest) != str(source):
                return False
    except OSError:
        return False
    return True


def link_files(root: Path, manifest: Manifest, mirror: Path) -> None:
    """Lay the empty folder ``mirror`` out as a writable mirror of the node image at ``root``:
    each file of ``manifest`` a symlink to the image's, except those under an
    :data:`INDUCTOR_CACHE` folder, which are copied.

    vLLM 0.32 writes under the AOT entry's ``inductor_cache/`` while it loads the artifact
    (``vllm/compilation/decorators.py``: ``TORCHINDUCTOR_CACHE_DIR`` is set under
    ``VLLM_CACHE_ROOT`` "unconditionally", as "post-load execution ... need to write" there), so
    ``VLLM_CACHE_ROOT`` cannot be the read-only mount itself; measured: vLLM stops with "Failed to
    reload cache entry from disk". Symlinks into the mount inside ``inductor_cache/`` fail the
    same way (measured, torch 2.13: "Failed to load artifact"), so those files are copied; the
    image stays as it is.

    Raises:
        StoreDataInvalid: a manifest path escapes ``root`` or ``mirror``.
        OSError: ``mirror`` cannot be written.
    """
    for file in manifest.files():
        source, dest = inside(root, file.path), inside(mirror, file.path)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if INDUCTOR_CACHE in PurePosixPath(file.path).parts:
            shutil.copyfile(source, dest)
            if file.executable:
                dest.chmod(0o755)
        else:
            dest.symlink_to(source)
