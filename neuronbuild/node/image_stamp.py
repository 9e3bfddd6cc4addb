"""The stamp a node image carries, and the check that a folder (its read-only mount) holds a
manifest by that stamp.

``serve``'s own stamp (:mod:`.materialize`) records each file's inode, which no other machine can
match: an image is unpacked by the node's container runtime, so every inode differs from where it
was built. A node image instead fixes what survives unpacking: each file's size and a fixed
modification time (:data:`IMAGE_MTIME`, which OCI layers carry in their tar headers and container
runtimes keep), beside the manifest digest. The stamp is the same file (:data:`NODE_STAMP`) with
``"image": true`` and ``[size, mtime ns]`` per path. A folder holding such a stamp is served as it
is and never written: it is either the manifest's bytes (sizes and mtimes hold, and the bytes
hash as the manifest says, at the first start on a node; later starts trust the node's own
record of that check, kept outside the mount) or refused in one line. vLLM itself writes
beside its artifacts while loading them, so ``serve`` hands it a writable mirror of symlinks into
the image (:mod:`.mirrors`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from neuronbuild.digest import canonical_json, hash_file
from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.node.host_records import read_record, record_path, write_record
from neuronbuild.node.materialize import read_stamp_value
from neuronbuild.store.cas import Store
from neuronbuild.store.layout import IMAGE_STORE, Layout
from neuronbuild.store.records import Manifest

IMAGE_MTIME = 0
"""Every file's and folder's modification time in a node image (seconds since the epoch): fixed,
so one manifest gives one layer digest on any machine (the reproducible-builds convention of
a clamped ``SOURCE_DATE_EPOCH``)."""


def image_stamp(manifest: Manifest, digest: str) -> bytes:
    """The canonical bytes of the stamp a node image of ``manifest`` (``digest``) carries at
    :data:`NODE_STAMP`: ``{"image": true, "manifest": digest, "files": {path: [size, mtime
    ns]}}``."""
    files = {f.path: [f.size, IMAGE_MTIME * 10**9] for f in manifest.files()}
    return canonical_json({"files": files, "image": True, "manifest": digest})


def read_image_stamp(root: Path) -> dict[str, Any] | None:
    """The node image stamp under ``root``, or None when ``root`` holds none (no stamp, or
    ``serve``'s own, or one too large, unreadable or malformed to be an image's); raises
    nothing.
    """
    value = read_stamp_value(root)
    if not isinstance(value, dict) or value.get("image") is not True:
        return None
    if not isinstance(value.get("files"), dict) or not isinstance(value.get("manifest"), str):
        return None
    return value


def check_image(root: Path, manifest: Manifest, digest: str, *, deep: bool = False) -> bool:
    """Whether ``root`` holds a node image; if it does, that it holds ``manifest`` (``digest``): its
    stamp names that manifest, and every file of the manifest is there, a regular file (no symlink)
    of its size and :data:`IMAGE_MTIME`, and of its bytes: hashed at the first start on this node
    (an image's stamp is the image's own, so a forged image of the right sizes and times would pass
    it), then trusted by the node's own record of that check (:func:`checked_path`, outside the
    mount: each file's device, inode, size, mtime and ctime, which no write can set back) while
    every file keeps them; ``deep`` re-hashes whatever the record says. Nothing under ``root`` is
    written. False when ``root`` holds no node image stamp (a folder ``serve`` lays out itself).

    Raises:
        UserError: the image holds another manifest (the message names both, exit code 2).
        StoreDataInvalid: a file is missing, of another size or mtime, or of other bytes: the
            image is damaged, forged or not unpacked whole (exit code 2).
    """
    stamp = read_image_stamp(root)
    if stamp is None:
        return False
    if stamp["manifest"] != digest:
        raise UserError(
            f"layout root {root} is a node image of manifest {str(stamp['manifest'])[:80]!a}, "
            f"not {digest}: mount the image `neuronbuild image {digest}` pushed, or serve the "
            "manifest it holds"
        )
    mtime_ns = IMAGE_MTIME * 10**9
    seen: dict[str, list[int]] = {}
    for file in manifest.files():
        where = f"layout root {root} (a node image of {digest[:19]}): {file.path}"
        path = root / file.path
        try:
            if path.is_symlink() or not path.is_file():
                raise StoreDataInvalid(f"{where} is missing; the image is damaged, pull it again")
            st = path.stat()
        except OSError as exc:
            raise StoreDataInvalid(f"{where} cannot be read: {exc.strerror}") from None
        if st.st_size != file.size:
            raise StoreDataInvalid(
                f"{where} is {st.st_size} bytes, the manifest says {file.size}; the image is "
                "damaged, pull it again"
            )
        if st.st_mtime_ns != mtime_ns:
            raise StoreDataInvalid(
                f"{where} was modified after the image was built (mtime {st.st_mtime_ns} ns, "
                f"the image's is {mtime_ns}); pull the image again"
            )
        seen[file.path] = [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
    record = checked_path(root, digest)
    if not deep and read_record(record) == seen:
        return True
    for file in manifest.files():
        if hash_file(root / file.path) != (file.digest, file.size):
            where = f"layout root {root} (a node image of {digest[:19]}): {file.path}"
            raise StoreDataInvalid(
                f"{where} does not hash to {file.digest}; the image is damaged or forged, "
                "pull it again"
            )
    write_record(record, seen)  # a node whose cache is read-only hashes every start
    return True


def checked_path(root: Path, digest: str) -> Path:
    """This node's record that the image mounted at ``root`` held ``digest``'s bytes when last
    hashed: under the node's cache (``$XDG_CACHE_HOME/neuronbuild/image-checks``), never in
    the read-only mount, named by the mount's path and the manifest."""
    return record_path("image-checks", str(root.resolve()), digest)


def image_manifest_path(digest: str) -> str:
    """Where a node image of manifest ``digest`` holds the manifest's bytes (relative to its
    root): the manifest's place in :data:`IMAGE_STORE`."""
    return Layout(IMAGE_STORE).manifest(digest)


def image_manifest_store(root: Path) -> Store | None:
    """The folder store a node image under ``root`` carries (:data:`IMAGE_STORE`: its manifest,
    read through the store's verifying reader, which checks the bytes against their digest), for
    a node whose store cannot be reached; None when ``root`` holds no node image or no such
    store (an image built before it had one)."""
    if read_image_stamp(root) is None or not (root / IMAGE_STORE / "manifests").is_dir():
        return None
    return Store(str(root / IMAGE_STORE))
