"""The layer of a node image: one reproducible, uncompressed tar of a manifest's lay-out.

The tree is the one ``serve`` lays out under ``VLLM_CACHE_ROOT`` (every file of the manifest at
its path, executables ``0755``, others ``0644``) plus the node image's stamp
(:func:`~neuronbuild.node.image_stamp.image_stamp`) and the manifest itself, in a folder store of
its own (:data:`~neuronbuild.store.layout.IMAGE_STORE`), so that a node with the image's mount
alone can serve it (:func:`~neuronbuild.node.image_stamp.image_manifest_store`). One manifest
gives one byte stream on any machine: entries sorted by path (each folder before what it holds),
owner ``0:0`` with no user or group names, every mtime
:data:`~neuronbuild.node.image_stamp.IMAGE_MTIME`, POSIX.1-2001 (pax) headers, no host path. The
layer is not compressed: gzip's bytes differ between zlib versions, which would break that, and
compiled artifacts compress little. File bytes are streamed, one blob at a time, verified by the
store's reader, never held in memory.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO

from neuronbuild.errors import StoreDataInvalid
from neuronbuild.node.image_stamp import IMAGE_MTIME, image_manifest_path, image_stamp
from neuronbuild.store.layout import NODE_STAMP
from neuronbuild.store.records import FileRecord, Manifest

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"
"""An uncompressed OCI layer (image-spec ``layer.md``): its digest is its ``diff_id`` too."""

FetchBlob = Callable[[FileRecord, Path], None]
"""Writes a file's verified bytes to a local path
(:meth:`~neuronbuild.store.cas.Store.fetch_blob`)."""


@dataclass(frozen=True)
class Layer:
    """A written layer: its ``digest`` (``sha256:<hex>``, also its ``diff_id``), ``size`` in
    bytes, and the ``files`` and file ``bytes`` of the manifest it holds."""

    digest: str
    size: int
    files: int
    bytes: int


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what passes to ``out``."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out, self.sha, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.size += len(data)
        self.out.write(data)
        return len(data)


def _parts(path: str) -> tuple[str, ...]:
    return PurePosixPath(path).parts


def tree(manifest: Manifest, own: Iterable[str]) -> list[tuple[str, FileRecord | None]]:
    """Every entry of the layer, in order: ``(path, file)`` for a file of the manifest, ``(path,
    None)`` for a folder (each folder once, before what it holds) and for each of ``own``, the
    layer's files that are not the manifest's (the stamp, the image's copy of the manifest), all
    in the stamp's folder.

    Raises:
        StoreDataInvalid: a path of the manifest lies in the stamp's folder (hostile).
    """
    files = {f.path: f for f in manifest.files()}
    stamp_folder = _parts(NODE_STAMP)[0]
    for path in files:
        if _parts(path)[0] == stamp_folder:
            raise StoreDataInvalid(f"manifest path {path!a} is inside {stamp_folder}/, the stamp's")
    own = list(own)
    folders = {"/".join(_parts(p)[:i]) for p in [*files, *own] for i in range(1, len(_parts(p)))}
    entries: list[tuple[str, FileRecord | None]] = [(d, None) for d in folders]
    entries += [(p, f) for p, f in files.items()]
    entries += [(p, None) for p in own]
    return sorted(entries, key=lambda e: _parts(e[0]))


def _info(path: str, kind: bytes, size: int = 0, mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(path)
    info.type, info.size, info.mode = kind, size, mode
    info.mtime, info.uid, info.gid, info.uname, info.gname = IMAGE_MTIME, 0, 0, "", ""
    return info


def _uses(manifest: Manifest) -> dict[str, int]:
    counts: dict[str, int] = {}
    for f in manifest.files():
        counts[f.digest] = counts.get(f.digest, 0) + 1
    return counts


def write_layer(
    manifest: Manifest, digest: str, fetch: FetchBlob, out: IO[bytes], scratch: Path
) -> Layer:
    """Write the layer of ``manifest`` (``digest``) to ``out``, fetching each blob once with
    ``fetch`` into the folder ``scratch`` (one blob there at a time, or a few when files share
    one) and streaming it into the tar.

    Raises:
        whatever ``fetch`` raises (a blob missing or corrupt in the store: StoreDataInvalid;
        the store failing: StoreError); OSError writing ``out`` or ``scratch``.
    """
    stream = _Hashing(out)
    uses = _uses(manifest)
    held: dict[str, Path] = {}
    own = {
        NODE_STAMP: image_stamp(manifest, digest),
        image_manifest_path(digest): manifest.to_bytes(),
    }
    with tarfile.open(fileobj=stream, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for path, file in tree(manifest, own):
            if file is None and path in own:
                data = own[path]
                tar.addfile(_info(path, tarfile.REGTYPE, len(data)), io.BytesIO(data))
            elif file is None:
                tar.addfile(_info(path, tarfile.DIRTYPE, mode=0o755))
            else:
                local = held.get(file.digest)
                if local is None:
                    local = held[file.digest] = scratch / file.digest.removeprefix("sha256:")
                    fetch(file, local)
                mode = 0o755 if file.executable else 0o644
                with local.open("rb") as src:
                    tar.addfile(_info(path, tarfile.REGTYPE, file.size, mode), src)
                uses[file.digest] -= 1
                if not uses[file.digest]:
                    held.pop(file.digest).unlink()
    files = manifest.files()
    return Layer(
        "sha256:" + stream.sha.hexdigest(), stream.size, len(files), sum(f.size for f in files)
    )
