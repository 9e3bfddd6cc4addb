"""The content-addressed store on an fsspec URL, laid out as DESIGN.md says:

```
<root>/blobs/sha256/<2 hex>/<64 hex>     file bytes; verified on write and on every read
<root>/units/<unit key hex>.json         UnitRecord (the first one written for a key wins)
<root>/manifests/<sha256 hex>.json       Manifest, named by the hash of its canonical bytes
<root>/refs/<name>/<tag>                 manifest digest
<root>/history/<name>/<tag>/<time>-*.json  one object per move of that ref
<root>/failures/<unit key hex>.json      the last failed compile of a unit (never blocks a retry)
```

Publish order is blobs, unit records, manifest, ref, so a reader never finds a manifest whose blobs
are missing. Every write is atomic (see :mod:`neuronbuild.storage`); a crash leaves at most an
orphan temporary file or an unreferenced blob.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import fsspec

from neuronbuild import envs
from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.manifest import FileEntry, Manifest, UnitRecord, check_digest
from neuronbuild.storage import FolderStorage, SwapConflict, storage_for

LATEST = "latest"
"""The tag ``compile`` moves: ``<recipe name>/latest``."""

LIST_THRESHOLD = 64
"""Above this many blobs, presence is checked from one listing instead of one request each."""


def s3_options() -> dict[str, Any]:
    """s3fs options: 5 s to connect, ``$NEURONBUILD_S3_READ_TIMEOUT`` (default 20) seconds per
    read, and botocore's standard retry mode (5 attempts, with backoff, on throttling, 5xx and
    timeouts); a fault that outlasts them is a StoreError (exit code 3)."""
    return {
        "config_kwargs": {
            "connect_timeout": 5,
            "read_timeout": float(os.environ.get(envs.NEURONBUILD_S3_READ_TIMEOUT, "20")),
            "retries": {"max_attempts": 5, "mode": "standard"},
        }
    }


UPLOAD_ATTEMPTS = 3
"""Uploads of one blob before giving up when the stored size keeps differing."""

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


def hash_stream(f: Any) -> tuple[str, int]:
    """``(sha256:<hex>, size in bytes)`` of what a binary file object holds from its position."""
    h = hashlib.sha256()
    size = 0
    while chunk := f.read(CHUNK):
        h.update(chunk)
        size += len(chunk)
    return "sha256:" + h.hexdigest(), size


def hash_file(path: str | Path) -> tuple[str, int]:
    """``(sha256:<hex>, size in bytes)`` of a local file."""
    with open(path, "rb") as f:
        return hash_stream(f)


class Store:
    """A compile cache at ``url`` (a folder path, ``file://``, ``s3://bucket/prefix``, or another
    fsspec URL, read-only there unless ``last_writer_wins``).

    Credentials, region and endpoint of ``s3://`` come from the usual AWS environment and config
    (``AWS_ENDPOINT_URL`` included).

    Raises:
        StoreError: the store cannot be reached or written (exit code 3).
        StoreDataInvalid: a record or manifest in it is malformed or hostile (exit code 2).
    """

    def __init__(self, url: str, *, last_writer_wins: bool = False) -> None:
        self.url = url
        try:
            options = s3_options() if url.startswith(("s3://", "s3a://")) else {}
            fs, root = fsspec.core.url_to_fs(url, **options)
        except (ValueError, ImportError) as exc:
            raise UserError(f"--cache {url!r}: {exc}") from None
        self.storage = storage_for(fs, root, url, last_writer_wins)
        self.root = self.storage.root

    def __repr__(self) -> str:
        return f"Store({self.url!r})"

    @property
    def is_folder(self) -> bool:
        """Whether the store is a local (or NFS) folder, usable as a node's local tier."""
        return isinstance(self.storage, FolderStorage)

    def check_writable(self) -> None:
        """Write and delete a probe object, so a read-only store fails before hours of work.

        Raises:
            UserError: publishing is not possible at this URL. StoreError: the write failed.
        """
        probe = self._path("tmp", f"probe-{uuid.uuid4().hex}")
        self.storage.put(probe, b"")
        self.storage.delete(probe)

    # Paths.

    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def blob_path(self, digest: str) -> str:
        hexdigest = check_digest(digest, "blob").split(":", 1)[1]
        return self._path("blobs", "sha256", hexdigest[:2], hexdigest)

    def blob_url(self, digest: str) -> str:
        """The blob's full URL, for messages."""
        return self.storage.fs.unstrip_protocol(self.blob_path(digest))  # type: ignore[no-any-return]

    def unit_path(self, key: str) -> str:
        return self._path("units", check_digest(key, "unit key").split(":", 1)[1] + ".json")

    def manifest_path(self, digest: str) -> str:
        return self._path("manifests", check_digest(digest, "manifest").split(":", 1)[1] + ".json")

    def ref_path(self, name: str, tag: str) -> str:
        return self._path("refs", name, tag)

    # Blobs.

    def has_blob(self, entry: FileEntry) -> bool:
        """Whether the blob is present with the expected size (bytes)."""
        return self.storage.size(self.blob_path(entry.digest)) == entry.size

    def missing_blobs(self, entries: Iterable[FileEntry], workers: int = 16) -> list[FileEntry]:
        """The entries whose blob is absent or of the wrong size.

        Up to :data:`LIST_THRESHOLD` blobs are checked one request each, concurrently; more are
        checked against one paginated listing of ``blobs/`` (1,000 keys per S3 request).
        """
        unique = list({e.digest: e for e in entries}.values())
        if len(unique) > LIST_THRESHOLD:
            sizes = self.storage.list_sizes(self._path("blobs"))
            return [e for e in unique if sizes.get(self.blob_path(e.digest)) != e.size]
        with ThreadPoolExecutor(max_workers=workers) as pool:
            present = list(pool.map(self.has_blob, unique))
        return [e for e, ok in zip(unique, present, strict=True) if not ok]

    def put_file(self, local_path: str | Path) -> tuple[str, int]:
        """Store a local file's bytes as a blob; returns ``(digest, size in bytes)``.

        The file is hashed first and uploaded only when the store lacks that blob; its stored
        size is checked after the upload, so a blob is never stored under the wrong digest.
        """
        digest, size = hash_file(local_path)
        entry = FileEntry("blob", digest, size)
        for _ in range(UPLOAD_ATTEMPTS):
            if self.has_blob(entry):
                return digest, size
            self.storage.put_file(local_path, self.blob_path(digest))
        if not self.has_blob(entry):
            raise StoreError(f"{self.blob_url(digest)}: uploads keep leaving the wrong size")
        return digest, size

    def put_files(self, paths: list[Path], jobs: int = 8) -> list[tuple[str, int]]:
        """Store many local files as blobs: hashed, one batched presence check, then only the
        missing ones uploaded, ``jobs`` at a time. Returns ``(digest, size)`` per path."""
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            hashed = list(pool.map(hash_file, paths))
            entries = [FileEntry(str(p), d, s) for p, (d, s) in zip(paths, hashed, strict=True)]
            missing = {e.digest for e in self.missing_blobs(entries)}
            todo = {e.digest: Path(e.path) for e in entries if e.digest in missing}
            list(pool.map(self.put_file, todo.values()))
        return hashed

    def put_verified(self, local: Path, entry: FileEntry) -> None:
        """Store a local file whose bytes were just verified against ``entry``: renamed into place
        on a folder store on the same file system (no second copy), uploaded elsewhere."""
        if isinstance(self.storage, FolderStorage):
            self.storage.move_in(local, self.blob_path(entry.digest))
        else:
            self.put_file(local)

    def fetch_blob(self, entry: FileEntry, dest: str | Path) -> None:
        """Copy a blob to the local file ``dest``, verifying its sha256 and size on the way.

        Raises:
            StoreDataInvalid: the blob is missing or its bytes do not match (its URL is named);
                ``dest`` is not written.
            StoreError: the store failed while reading.
        """
        src = self.blob_path(entry.digest)
        dest = Path(dest)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}.part")
        h = hashlib.sha256()
        size = 0
        try:
            with self.storage.open_read(src) as f, open(tmp, "xb") as out:
                while chunk := f.read(CHUNK):
                    h.update(chunk)
                    out.write(chunk)
                    size += len(chunk)
            if "sha256:" + h.hexdigest() != entry.digest or size != entry.size:
                raise StoreDataInvalid(
                    f"{self.blob_url(entry.digest)} is corrupt (expected {entry.digest}, "
                    f"{entry.size} bytes; found sha256:{h.hexdigest()}, {size} bytes)"
                )
            os.replace(tmp, dest)
        except FileNotFoundError:
            raise StoreDataInvalid(f"{self.blob_url(entry.digest)} is missing") from None
        except OSError as exc:
            raise StoreError(f"{self.blob_url(entry.digest)}: {exc}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    # Unit records.

    def get_unit(self, key: str) -> UnitRecord | None:
        """The unit record stored for ``key``, or None."""
        data = self.storage.read(self.unit_path(key))
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
        return {k for k in keys if self.storage.exists(self.unit_path(k))}

    def put_unit(self, record: UnitRecord) -> UnitRecord:
        """Publish ``record`` after checking its blobs are present; the first record for a key
        wins, and a later builder adopts (and returns) the stored one."""
        missing = self.missing_blobs(record.files)
        if missing:
            raise StoreError(f"{self.url}: unit {record.key} lacks blobs for {missing[0].path}")
        data = json.dumps(record.to_json(), sort_keys=True, indent=1).encode()
        if self.storage.create(self.unit_path(record.key), data):
            return record
        stored = self.get_unit(record.key)
        if stored is None:
            raise StoreError(f"{self.url}: unit {record.key} exists but cannot be read")
        return stored

    def record_failure(self, key: str, info: dict[str, Any]) -> None:
        """Remember a unit's last failed compile, apart from results (a retry is never blocked)."""
        hexkey = check_digest(key, "unit key").split(":", 1)[1]
        self.storage.put(self._path("failures", hexkey + ".json"), json.dumps(info).encode())

    # Manifests.

    def put_manifest(self, manifest: Manifest) -> str:
        """Seal ``manifest``: check every unit record and blob is present, then write it under
        its own digest (exclusive create). Returns ``sha256:<hex>``."""
        for unit in manifest.units:
            if not self.storage.exists(self.unit_path(unit.key)):
                raise StoreError(
                    f"{self.url}: cannot seal, unit {unit.key} is not published; "
                    "compile (or push) the recipe again"
                )
        missing = self.missing_blobs(manifest.files())
        if missing:
            raise StoreError(
                f"{self.url}: cannot seal, the blob of {missing[0].path} is missing; "
                "compile (or push) the recipe again"
            )
        digest = manifest.digest
        self.storage.create(self.manifest_path(digest), manifest.to_bytes())
        return digest

    def get_manifest(self, digest: str) -> Manifest:
        """The manifest named ``digest`` (bytes verified against it).

        Raises:
            UserError: no such manifest in this store.
            StoreDataInvalid: it is malformed or does not match its name.
        """
        data = self.storage.read(self.manifest_path(digest))
        if data is None:
            raise UserError(f"{self.url}: no manifest {digest}")
        return Manifest.from_bytes(data, f"{self.url}: manifest {digest}", digest)

    # Refs.

    def get_ref(self, name: str, tag: str) -> str | None:
        """The manifest digest ``<name>/<tag>`` points at, or None."""
        data = self.storage.read(self.ref_path(name, tag))
        if data is None:
            return None
        return check_digest(data.decode(errors="replace").strip(), f"ref {name}/{tag}")

    def move_ref(self, name: str, tag: str, digest: str, expected: str | None) -> None:
        """Point ``<name>/<tag>`` at ``digest`` if it still points at ``expected`` (None: absent),
        by compare-and-swap, then record the move in the ref's history.

        Raises:
            RefConflict: the ref points elsewhere (another builder moved it first).
            StoreError: ``digest`` is not a manifest of this store.
        """
        if not self.storage.exists(self.manifest_path(digest)):
            raise StoreError(f"{self.url}: cannot move {name}/{tag} to unknown manifest {digest}")
        path = self.ref_path(name, tag)
        data, token = self.storage.read_versioned(path)
        current = None if data is None else data.decode(errors="replace").strip()
        if current != expected:
            raise RefConflict(f"{name}/{tag} points at {current}, not {expected}")
        if current == digest:
            return
        try:
            self.storage.swap(path, (digest + "\n").encode(), token)
        except SwapConflict:
            raise RefConflict(f"{name}/{tag} moved while moving it to {digest}") from None
        # One object per move: appending is not atomic on object stores.
        now = time.time()
        entry = {"time": now, "manifest": digest, "previous": current}
        move = f"{int(now * 1e9):020d}-{digest.split(':', 1)[1][:16]}.json"
        self.storage.create(self._path("history", name, tag, move), json.dumps(entry).encode())

    def set_ref(self, name: str, tag: str, digest: str, attempts: int = 5) -> None:
        """Move ``<name>/<tag>`` to ``digest`` by compare-and-swap, re-reading and retrying when
        another writer moved it in between (the last writer wins, no move is lost from history).

        Raises:
            RefConflict: still contended after ``attempts`` tries.
        """
        for attempt in range(attempts):
            try:
                self.move_ref(name, tag, digest, self.get_ref(name, tag))
                return
            except RefConflict:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.05 * (attempt + 1))

    def refs(self) -> dict[str, str]:
        """Every ref ``<name>/<tag>`` and the manifest it points at."""
        out = {}
        prefix = self._path("refs") + "/"
        for path in self.storage.find(self._path("refs")):
            name, _, tag = path.removeprefix(prefix).partition("/")
            if REF_PART.match(name) and REF_PART.match(tag):
                digest = self.get_ref(name, tag)
                if digest is not None:
                    out[f"{name}/{tag}"] = digest
        return out

    def overview(self) -> dict[str, Any]:
        """The store's URL, refs, and the counts of :meth:`summary` (``ls`` and ``status``)."""
        return {"store": self.url, "refs": self.refs(), **self.summary()}

    def summary(self) -> dict[str, int]:
        """Counts of manifests, unit records and blobs, and the blobs' bytes."""
        blobs = self.storage.list_sizes(self._path("blobs"))
        return {
            "manifests": len(self.storage.find(self._path("manifests"))),
            "units": len(self.storage.find(self._path("units"))),
            "blobs": len(blobs),
            "bytes": sum(blobs.values()),
        }

    def ref_history(self, name: str, tag: str) -> list[dict[str, Any]]:
        """Every recorded move of ``<name>/<tag>``, oldest first."""
        moves = []
        for path in self.storage.find(self._path("history", name, tag)):
            data = self.storage.read(path)
            try:
                move = json.loads(data or b"")
            except (json.JSONDecodeError, UnicodeDecodeError):
                move = None
            if (
                not isinstance(move, dict)
                or not isinstance(move.get("time"), int | float)
                or not isinstance(move.get("manifest"), str)
                or not isinstance(move.get("previous"), str | None)
            ):
                raise StoreDataInvalid(f"{self.url}: malformed ref history {path}")
            check_digest(move["manifest"], f"ref history {path}")
            moves.append(move)
        return moves

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
