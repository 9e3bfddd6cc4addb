"""The content-addressed store on an fsspec URL, laid out as DESIGN.md says:

```
<root>/blobs/sha256/<2 hex>/<64 hex>     file bytes; verified on write and on every read
<root>/units/<unit key hex>.json         UnitRecord (the first one written for a key wins)
<root>/manifests/<sha256 hex>.json       Manifest, named by the hash of its canonical bytes
<root>/refs/<name>/<tag>                 manifest digest
<root>/history/<name>/<tag>.jsonl        every move of that ref
<root>/failures/<unit key hex>.json      the last failed compile of a unit (never blocks a retry)
```

Publish order is blobs, unit records, manifest, ref, so a reader never finds a manifest whose blobs
are missing. Every write is atomic: a temporary file in ``<root>/tmp/`` renamed into place, or
hard-linked for exclusive create; a crash leaves at most an orphan temporary file. Publishing is
supported on folders (local disks and NFS mounts); other fsspec URLs are read-only here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import fsspec
from filelock import FileLock
from fsspec.implementations.local import LocalFileSystem

from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.manifest import FileEntry, Manifest, UnitRecord, check_digest

CHUNK = 1 << 20
"""Bytes per read while hashing or copying (1 MiB)."""

REF_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class RefConflict(StoreError):
    """A compare-and-swap ref move found another manifest than expected."""


def parse_ref(ref: str) -> tuple[str, str]:
    """``<name>/<tag>`` -> ``(name, tag)``; UserError for anything else."""
    name, sep, tag = ref.partition("/")
    if not sep or not REF_PART.match(name) or not REF_PART.match(tag):
        raise UserError(f"ref {ref!r}: expected <name>/<tag>, e.g. cpu-tiny-llama/latest")
    return name, tag


def hash_file(path: str | Path) -> tuple[str, int]:
    """``(sha256:<hex>, size in bytes)`` of a local file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return "sha256:" + h.hexdigest(), size


class Store:
    """A compile cache at ``url`` (a folder path, ``file://``, or another fsspec URL).

    Raises:
        StoreError: the store cannot be reached or written (exit code 3).
        StoreDataInvalid: a record or manifest in it is malformed or hostile (exit code 2).
    """

    def __init__(self, url: str) -> None:
        self.url = url
        try:
            self.fs, root = fsspec.core.url_to_fs(url)
        except (ValueError, ImportError) as exc:
            raise UserError(f"--cache {url!r}: {exc}") from None
        self.root = root.rstrip("/")
        self.local = isinstance(self.fs, LocalFileSystem)

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    # Paths.

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def blob_path(self, digest: str) -> str:
        hexdigest = check_digest(digest, "blob").split(":", 1)[1]
        return self._path("blobs", "sha256", hexdigest[:2], hexdigest)

    def unit_path(self, key: str) -> str:
        return self._path("units", check_digest(key, "unit key").split(":", 1)[1] + ".json")

    def manifest_path(self, digest: str) -> str:
        return self._path("manifests", check_digest(digest, "manifest").split(":", 1)[1] + ".json")

    def ref_path(self, name: str, tag: str) -> str:
        return self._path("refs", name, tag)

    # Low-level atomic writes (folders only).

    def _require_writable(self) -> None:
        if not self.local:
            raise UserError(
                f"--cache {self.url}: publishing is supported on folders only; "
                "pull from this URL and publish to a folder"
            )

    @contextlib.contextmanager
    def _temp(self) -> Iterator[str]:
        """A fresh temporary path inside the store (same file system, so a rename is atomic),
        removed on exit unless it was renamed away."""
        self._require_writable()
        tmp_dir = self._path("tmp")
        os.makedirs(tmp_dir, exist_ok=True)
        path = os.path.join(tmp_dir, f"{uuid.uuid4().hex}.part")
        try:
            yield path
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    @contextlib.contextmanager
    def _temp_with(self, data: bytes) -> Iterator[str]:
        """A temporary file holding ``data``, flushed to disk."""
        with self._temp() as tmp:
            with open(tmp, "xb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            yield tmp

    def _write_atomic(self, path: str, data: bytes) -> None:
        with self._temp_with(data) as tmp:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.replace(tmp, path)

    def _create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` unless it exists; True if this call created it."""
        with self._temp_with(data) as tmp:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            return True

    def _read(self, path: str) -> bytes | None:
        try:
            with self.fs.open(path, "rb") as f:
                data: bytes = f.read()
                return data
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{self.url}: cannot read {path}: {exc}") from None

    # Blobs.

    def has_blob(self, entry: FileEntry) -> bool:
        """Whether the blob is present with the expected size (bytes)."""
        try:
            return bool(self.fs.size(self.blob_path(entry.digest)) == entry.size)
        except FileNotFoundError:
            return False

    def put_file(self, local_path: str | Path) -> tuple[str, int]:
        """Store a local file's bytes as a blob; returns ``(digest, size in bytes)``.

        The bytes are hashed while they are copied, and only a copy whose hash is known is
        renamed into place, so a blob is never stored under the wrong digest.
        """
        h = hashlib.sha256()
        size = 0
        with self._temp() as tmp:
            with open(local_path, "rb") as src, open(tmp, "xb") as f:
                while chunk := src.read(CHUNK):
                    h.update(chunk)
                    f.write(chunk)
                    size += len(chunk)
                f.flush()
                os.fsync(f.fileno())
            digest = "sha256:" + h.hexdigest()
            final = self.blob_path(digest)
            if not os.path.exists(final):
                os.makedirs(os.path.dirname(final), exist_ok=True)
                os.replace(tmp, final)
        return digest, size

    def fetch_blob(self, entry: FileEntry, dest: str | Path) -> None:
        """Copy a blob to the local file ``dest``, verifying its sha256 and size on the way.

        Raises:
            StoreDataInvalid: the stored bytes do not match (the object's URL is named); ``dest``
                is not written.
            StoreError: the blob is missing.
        """
        src = self.blob_path(entry.digest)
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.part")
        h = hashlib.sha256()
        size = 0
        try:
            with self.fs.open(src, "rb") as f, open(tmp, "xb") as out:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            if "sha256:" + h.hexdigest() != entry.digest or size != entry.size:
                raise StoreDataInvalid(
                    f"{self.url}: blob {src} is corrupt (expected {entry.digest}, "
                    f"{entry.size} bytes; found sha256:{h.hexdigest()}, {size} bytes)"
                )
            os.replace(tmp, dest)
        except FileNotFoundError:
            raise StoreError(f"{self.url}: blob {entry.digest} is missing") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    # Unit records.

    def get_unit(self, key: str) -> UnitRecord | None:
        """The unit record stored for ``key``, or None."""
        data = self._read(self.unit_path(key))
        if data is None:
            return None
        try:
            raw = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreDataInvalid(f"{self.url}: unit {key}: malformed JSON ({exc})") from None
        record = UnitRecord.from_json(raw, f"{self.url}: unit {key}")
        if record.key != key:
            raise StoreDataInvalid(f"{self.url}: unit {key} holds the record of {record.key}")
        return record

    def held_units(self, keys: Iterable[str]) -> set[str]:
        """The subset of ``keys`` that have a unit record."""
        return {k for k in keys if self.fs.exists(self.unit_path(k))}

    def put_unit(self, record: UnitRecord) -> UnitRecord:
        """Publish ``record`` after checking its blobs are present; the first record for a key
        wins, and a later builder adopts (and returns) the stored one."""
        missing = [f.path for f in record.files if not self.has_blob(f)]
        if missing:
            raise StoreError(f"{self.url}: unit {record.key} lacks blobs for {missing[:3]}")
        data = json.dumps(record.to_json(), sort_keys=True, indent=1).encode()
        if self._create_exclusive(self.unit_path(record.key), data):
            return record
        stored = self.get_unit(record.key)
        assert stored is not None
        return stored

    def record_failure(self, key: str, info: dict[str, Any]) -> None:
        """Remember a unit's last failed compile, apart from results (a retry is never blocked)."""
        hexkey = check_digest(key, "unit key").split(":", 1)[1]
        self._write_atomic(self._path("failures", hexkey + ".json"), json.dumps(info).encode())

    # Manifests.

    def put_manifest(self, manifest: Manifest) -> str:
        """Seal ``manifest``: check every unit record and blob is present, then write it under
        its own digest. Returns ``sha256:<hex>``."""
        for unit in manifest.units:
            if not self.fs.exists(self.unit_path(unit.key)):
                raise StoreError(f"{self.url}: cannot seal, unit {unit.key} is not published")
        missing = [f.digest for f in manifest.files() if not self.has_blob(f)]
        if missing:
            raise StoreError(f"{self.url}: cannot seal, blobs missing: {missing[:3]}")
        digest = manifest.digest
        self._create_exclusive(self.manifest_path(digest), manifest.to_bytes())
        return digest

    def get_manifest(self, digest: str) -> Manifest:
        """The manifest named ``digest`` (bytes verified against it).

        Raises:
            UserError: no such manifest in this store.
            StoreDataInvalid: it is malformed or does not match its name.
        """
        data = self._read(self.manifest_path(digest))
        if data is None:
            raise UserError(f"{self.url}: no manifest {digest}")
        return Manifest.from_bytes(data, f"{self.url}: manifest {digest}", digest)

    # Refs.

    def get_ref(self, name: str, tag: str) -> str | None:
        """The manifest digest ``<name>/<tag>`` points at, or None."""
        data = self._read(self.ref_path(name, tag))
        if data is None:
            return None
        return check_digest(data.decode(errors="replace").strip(), f"ref {name}/{tag}")

    def move_ref(self, name: str, tag: str, digest: str, expected: str | None) -> None:
        """Point ``<name>/<tag>`` at ``digest`` if it still points at ``expected`` (None: absent),
        and append the move to the ref's history.

        Raises:
            RefConflict: the ref points elsewhere (another builder moved it first).
            StoreError: ``digest`` is not a manifest of this store.
        """
        self._require_writable()
        if not self.fs.exists(self.manifest_path(digest)):
            raise StoreError(f"{self.url}: cannot move {name}/{tag} to unknown manifest {digest}")
        lock_path = self._path("locks", "refs", name, f"{tag}.lock")
        os.makedirs(os.path.dirname(lock_path), exist_ok=True)
        with FileLock(lock_path, timeout=60):
            current = self.get_ref(name, tag)
            if current != expected:
                raise RefConflict(f"{name}/{tag} points at {current}, not {expected}")
            if current == digest:
                return
            self._write_atomic(self.ref_path(name, tag), (digest + "\n").encode())
            entry = {"time": time.time(), "manifest": digest, "previous": current}
            history = self._path("history", name, f"{tag}.jsonl")
            os.makedirs(os.path.dirname(history), exist_ok=True)
            with open(history, "a") as f:
                f.write(json.dumps(entry) + "\n")

    def ref_history(self, name: str, tag: str) -> list[dict[str, Any]]:
        """Every recorded move of ``<name>/<tag>``, oldest first."""
        data = self._read(self._path("history", name, f"{tag}.jsonl"))
        if data is None:
            return []
        return [json.loads(line) for line in data.decode().splitlines() if line.strip()]

    def resolve(self, ref_or_digest: str) -> str:
        """A manifest digest from ``sha256:<hex>`` or ``<name>/<tag>``.

        Raises:
            UserError: a ref that does not exist, or text that is neither.
        """
        if ref_or_digest.startswith("sha256:"):
            return check_digest(ref_or_digest, "manifest")
        name, tag = parse_ref(ref_or_digest)
        digest = self.get_ref(name, tag)
        if digest is None:
            raise UserError(f"{self.url}: no ref {name}/{tag}; compile its recipe first")
        return digest


def copy_file(src: str | Path, dest: str | Path) -> None:
    """Copy a local file atomically (temporary name, then rename)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.part")
    try:
        shutil.copyfile(src, tmp)
        os.replace(tmp, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
