"""The store's small immutable types: file entries, unit records and manifests, and their parsing.

As in Bazel's remote execution API, content (blobs) is named by digest, small records reference it
by digest, and mutable names (refs) live apart. Everything here may come from a shared bucket, so
parsing treats it as untrusted: unknown schemas, malformed JSON, impossible sizes and paths that
could escape the folder they are laid out in raise :class:`~neuronbuild.errors.StoreDataInvalid`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from neuronbuild.errors import StoreDataInvalid
from neuronbuild.keys import canonical_json, sha256_digest

RECORD_SCHEMA = "neuronbuild.unit-record/1"
MANIFEST_SCHEMA = "neuronbuild.manifest/1"

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
MAX_BLOB_SIZE = 1 << 40
"""Largest blob size (bytes) a record may claim: 1 TiB; anything above is treated as hostile."""


def check_digest(value: Any, what: str) -> str:
    """``value`` if it is ``sha256:<64 lowercase hex>``; else StoreDataInvalid naming ``what``."""
    if not isinstance(value, str) or not DIGEST.match(value):
        raise StoreDataInvalid(f"{what}: not a sha256 digest: {str(value)[:80]!r}")
    return value


def check_relative_path(value: Any, what: str) -> str:
    """``value`` if it is a plain relative POSIX path that stays inside its folder.

    Rejects absolute paths, ``..`` and ``.`` segments, empty segments, backslashes and NUL: a
    hostile record must never make the runtime write outside the cache root.
    """
    if not isinstance(value, str) or not value or "\\" in value or "\0" in value:
        raise StoreDataInvalid(f"{what}: unsafe path {str(value)[:80]!r}")
    parts = value.split("/")
    if value.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StoreDataInvalid(f"{what}: unsafe path {value[:80]!r}")
    return str(PurePosixPath(value))


@dataclass(frozen=True)
class FileEntry:
    """One file of a compiled cache entry: ``path`` relative to ``VLLM_CACHE_ROOT``, the
    ``digest`` of its bytes, its ``size`` in bytes, and whether it was executable."""

    path: str
    digest: str
    size: int
    executable: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "digest": self.digest,
            "size": self.size,
            "executable": self.executable,
        }

    @classmethod
    def from_json(cls, data: Any, what: str) -> FileEntry:
        if not isinstance(data, dict):
            raise StoreDataInvalid(f"{what}: a file entry must be an object")
        size = data.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= MAX_BLOB_SIZE:
            raise StoreDataInvalid(f"{what}: impossible size {size!r}")
        return cls(
            path=check_relative_path(data.get("path"), what),
            digest=check_digest(data.get("digest"), what),
            size=size,
            executable=bool(data.get("executable", False)),
        )


@dataclass(frozen=True)
class UnitRecord:
    """What one compile unit produced: its key (with factors), graphs and files.

    ``toolchain`` holds the versions installed where it was built (equal to the recipe's pins,
    which ``compile`` enforces).
    """

    key: str
    factors: dict[str, Any]
    graphs: list[dict[str, Any]]
    files: tuple[FileEntry, ...]
    toolchain: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RECORD_SCHEMA,
            "key": self.key,
            "factors": self.factors,
            "graphs": self.graphs,
            "files": [f.to_json() for f in self.files],
            "toolchain": self.toolchain,
        }

    @classmethod
    def from_json(cls, data: Any, what: str) -> UnitRecord:
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
            schema = data.get("schema") if isinstance(data, dict) else None
            raise StoreDataInvalid(f"{what}: unknown unit record schema {schema!r}")
        files = data.get("files")
        factors, graphs, toolchain = data.get("factors"), data.get("graphs"), data.get("toolchain")
        if not isinstance(files, list) or not files:
            raise StoreDataInvalid(f"{what}: a unit record must list its files")
        if not isinstance(factors, dict) or not isinstance(graphs, list):
            raise StoreDataInvalid(f"{what}: factors must be an object and graphs a list")
        if not isinstance(toolchain, dict):
            raise StoreDataInvalid(f"{what}: toolchain must be an object")
        entries = tuple(FileEntry.from_json(f, what) for f in files)
        if len({e.path for e in entries}) != len(entries):
            raise StoreDataInvalid(f"{what}: a path is listed twice")
        key = check_digest(data.get("key"), what)
        if sha256_digest(canonical_json(factors)) != key:
            raise StoreDataInvalid(f"{what}: its factors do not hash to its key {key}")
        return cls(key, factors, graphs, entries, {str(k): str(v) for k, v in toolchain.items()})


@dataclass(frozen=True)
class Manifest:
    """The immutable deploy unit of one recipe: the recipe, and every unit with its files.

    Its name in the store is the sha256 of :meth:`to_bytes` (canonical JSON), so the same build
    seals the same manifest and a manifest cannot change without changing its name.
    """

    name: str
    recipe: dict[str, Any]
    units: tuple[UnitRecord, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": MANIFEST_SCHEMA,
            "name": self.name,
            "recipe": self.recipe,
            "units": [u.to_json() for u in self.units],
        }

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    @property
    def digest(self) -> str:
        return sha256_digest(self.to_bytes())

    def files(self) -> list[FileEntry]:
        """Every file of every unit, each path once (units of one recipe never overlap paths)."""
        seen: dict[str, FileEntry] = {}
        for unit in self.units:
            for entry in unit.files:
                seen.setdefault(entry.path, entry)
        return list(seen.values())

    @classmethod
    def from_bytes(cls, data: bytes, what: str, digest: str | None = None) -> Manifest:
        """Parse and check a manifest; with ``digest``, also that the bytes hash to it."""
        if digest is not None and sha256_digest(data) != digest:
            raise StoreDataInvalid(f"{what}: its bytes do not hash to {digest}")
        try:
            raw = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StoreDataInvalid(f"{what}: malformed JSON ({exc})") from None
        if not isinstance(raw, dict) or raw.get("schema") != MANIFEST_SCHEMA:
            schema = raw.get("schema") if isinstance(raw, dict) else None
            raise StoreDataInvalid(f"{what}: unknown manifest schema {schema!r}")
        name, recipe, units = raw.get("name"), raw.get("recipe"), raw.get("units")
        if not isinstance(name, str) or not isinstance(recipe, dict) or not isinstance(units, list):
            raise StoreDataInvalid(f"{what}: needs a name, a recipe object and a units list")
        return cls(name, recipe, tuple(UnitRecord.from_json(u, what) for u in units))
