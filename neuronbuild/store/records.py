"""The store's small immutable records: files, unit records, manifests and ref moves, and their
parsing.

As in Bazel's remote execution API, content (blobs) is named by digest, small records reference it
by digest, and mutable names (refs) live apart. Everything here may come from a shared bucket, so
parsing treats it as untrusted: a record is accepted only in its canonical bytes, with exactly its
fields and their exact types, and a manifest only when it describes a layout a file system can
hold (so ``verify`` and ``serve`` never disagree about it). Anything else raises
:class:`~neuronbuild.errors.StoreDataInvalid` (exit code 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from neuronbuild.digest import canonical_json, check_digest, parse_canonical, sha256_digest
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.graph import Graph
from neuronbuild.store.layout import REF_PART

RECORD_SCHEMA = "neuronbuild.unit-record/1"
MANIFEST_SCHEMA = "neuronbuild.manifest/1"
TIMING_SCHEMA = "neuronbuild.unit-timing/1"

MAX_TIMING_SECONDS = 30 * 86400.0
"""Longest compile a timing may claim (30 days); anything above is treated as hostile."""

MAX_BLOB_SIZE = 1 << 40
"""Largest blob size (bytes) a record may claim: 1 TiB; anything above is treated as hostile."""
MAX_NAME_BYTES = 255
"""Longest path segment (bytes of UTF-8) file systems hold (NAME_MAX on Linux, ext4, xfs)."""
MAX_PATH_BYTES = 1024
"""Longest relative file path a record may hold (bytes), well inside PATH_MAX (4096) once
joined under a node's cache root."""


def _fields(data: Any, names: set[str], what: str) -> dict[str, Any]:
    """``data`` if it is an object with exactly the keys ``names``."""
    if not isinstance(data, dict):
        raise StoreDataInvalid(f"{what}: expected an object")
    if set(data) != names:
        extra, missing = sorted(set(data) - names), sorted(names - set(data))
        raise StoreDataInvalid(f"{what}: unexpected fields {extra}, missing fields {missing}")
    return data


def _int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise StoreDataInvalid(f"{what}: impossible value {ascii(value)[:40]}")
    return value


def check_relative_path(value: Any, what: str) -> str:
    """``value`` if it is a plain relative POSIX path that stays inside its folder and that a
    file system can hold.

    Rejects absolute paths, ``..`` and ``.`` segments, empty segments, backslashes, NUL and other
    control characters, lone surrogates, a segment over :data:`MAX_NAME_BYTES` or a path over
    :data:`MAX_PATH_BYTES`: a hostile record must never make the runtime write outside its root.
    """
    if not isinstance(value, str) or not value:
        raise StoreDataInvalid(f"{what}: unsafe path {ascii(value)[:80]}")
    try:
        encoded = value.encode("utf-8")
    except UnicodeEncodeError:
        raise StoreDataInvalid(f"{what}: unsafe path {ascii(value)[:80]}") from None
    parts = value.split("/")
    if (
        value.startswith("/")
        or "\\" in value
        or any(ord(c) < 32 or c == "\x7f" for c in value)
        or any(p in ("", ".", "..") for p in parts)
        or len(encoded) > MAX_PATH_BYTES
        or any(len(p.encode()) > MAX_NAME_BYTES for p in parts)
    ):
        raise StoreDataInvalid(f"{what}: unsafe path {ascii(value)[:80]}")
    return value


@dataclass(frozen=True)
class FileRecord:
    """One file of a unit's output: ``path`` relative to ``VLLM_CACHE_ROOT`` (inside one of the
    entries, the folders an engine wrote), the ``digest`` of its bytes, its ``size`` in bytes,
    and whether it was executable."""

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
    def from_json(cls, data: Any, what: str) -> FileRecord:
        data = _fields(data, {"path", "digest", "size", "executable"}, f"{what}: a file")
        if not isinstance(data["executable"], bool):
            raise StoreDataInvalid(f"{what}: executable must be true or false")
        return cls(
            path=check_relative_path(data["path"], what),
            digest=check_digest(data["digest"], what),
            size=_int(data["size"], f"{what}: size", 0, MAX_BLOB_SIZE),
            executable=data["executable"],
        )


def _graph(data: Any, what: str) -> Graph:
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
        raise StoreDataInvalid(f"{what}: a graph must be an object with a kind")
    dims = tuple(
        (name, _int(value, f"{what}: graph {name}", 0, 1 << 40))
        for name, value in data.items()
        if name != "kind"
    )
    return Graph(data["kind"], dims)


@dataclass(frozen=True)
class UnitRecord:
    """What one compile unit produced: its key (with factors), graphs and files.

    ``toolchain`` holds the versions installed where it was built (equal to the recipe's pins,
    which ``compile`` enforces).
    """

    key: str
    factors: dict[str, Any]
    graphs: tuple[Graph, ...]
    files: tuple[FileRecord, ...]
    toolchain: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": RECORD_SCHEMA,
            "key": self.key,
            "factors": self.factors,
            "graphs": [g.to_json() for g in self.graphs],
            "files": [f.to_json() for f in self.files],
            "toolchain": self.toolchain,
        }

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    @classmethod
    def from_bytes(cls, data: bytes, what: str) -> UnitRecord:
        """Parse a stored unit record (canonical bytes only)."""
        return cls.from_json(parse_canonical(data, what), what)

    @classmethod
    def from_json(cls, data: Any, what: str) -> UnitRecord:
        names = {"schema", "key", "factors", "graphs", "files", "toolchain"}
        if isinstance(data, dict) and data.get("schema") != RECORD_SCHEMA:
            raise StoreDataInvalid(
                f"{what}: unknown unit record schema {ascii(data.get('schema'))[:60]}"
            )
        data = _fields(data, names, what)
        files, factors, graphs, toolchain = (
            data["files"],
            data["factors"],
            data["graphs"],
            data["toolchain"],
        )
        if not isinstance(files, list) or not files:
            raise StoreDataInvalid(f"{what}: a unit record must list its files")
        if not isinstance(factors, dict) or not isinstance(graphs, list):
            raise StoreDataInvalid(f"{what}: factors must be an object and graphs a list")
        if not isinstance(toolchain, dict) or not all(
            isinstance(v, str) for v in toolchain.values()
        ):
            raise StoreDataInvalid(f"{what}: toolchain must map names to version strings")
        entries = tuple(FileRecord.from_json(f, what) for f in files)
        if len({e.path for e in entries}) != len(entries):
            raise StoreDataInvalid(f"{what}: a path is listed twice")
        key = check_digest(data["key"], what)
        if sha256_digest(canonical_json(factors)) != key:
            raise StoreDataInvalid(f"{what}: its factors do not hash to its key {key}")
        return cls(key, factors, tuple(_graph(g, what) for g in graphs), entries, toolchain)


def check_layout(files: list[tuple[str, FileRecord]], what: str) -> None:
    """Refuse file lists no folder can hold as written: one path claimed twice (``owner`` names
    who claims it), a path that is both a file and a folder, one digest with two sizes.

    Raises:
        StoreDataInvalid: naming the path or digest.
    """
    paths: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for owner, entry in files:
        if entry.path in paths:
            raise StoreDataInvalid(
                f"{what}: {entry.path!r} is claimed by {paths[entry.path]} and {owner}"
            )
        paths[entry.path] = owner
        if sizes.setdefault(entry.digest, entry.size) != entry.size:
            raise StoreDataInvalid(f"{what}: {entry.digest} is listed with two sizes")
    for path in paths:
        parts = path.split("/")
        for i in range(1, len(parts)):
            if "/".join(parts[:i]) in paths:
                raise StoreDataInvalid(
                    f"{what}: {'/'.join(parts[:i])!r} is both a file and the folder of {path!r}"
                )


def _weights(data: Any, what: str) -> tuple[FileRecord, ...]:
    """A manifest's ``weights``: a list of at least one file, each a plain name once."""
    if not isinstance(data, list) or not data:
        raise StoreDataInvalid(f"{what}: expected a list of at least one file")
    files = tuple(FileRecord.from_json(f, what) for f in data)
    if any("/" in f.path for f in files) or len({f.path for f in files}) != len(files):
        raise StoreDataInvalid(f"{what}: each file must be a name in the model folder, once")
    return files


@dataclass(frozen=True)
class Manifest:
    """The immutable deploy unit of one recipe: the recipe, every unit with its files and, where
    the sealing host held them, the model's ``weights``.

    Its name in the store is the sha256 of :meth:`to_bytes` (canonical JSON), so the same build
    seals the same manifest and a manifest cannot change without changing its name. Its files
    form one layout: no path is claimed twice, none is both a file and a folder.

    ``weights``: each weight file of the model as built (its name in the model folder, sha256,
    size in bytes: :mod:`neuronbuild.node.weights`), at least one; None when the build recorded
    none, and then the manifest has no ``weights`` key, so its bytes and name are what they were
    before weights were recorded. A reader older than the field refuses a manifest carrying it
    (unexpected field): nodes are upgraded before the builders that write it.
    """

    name: str
    recipe: dict[str, Any]
    units: tuple[UnitRecord, ...]
    weights: tuple[FileRecord, ...] | None = None

    def __post_init__(self) -> None:
        check_layout(
            [(f"unit {u.key[:19]}", f) for u in self.units for f in u.files],
            f"manifest {self.name}",
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": MANIFEST_SCHEMA,
            "name": self.name,
            "recipe": self.recipe,
            "units": [u.to_json() for u in self.units],
        } | ({} if self.weights is None else {"weights": [w.to_json() for w in self.weights]})

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    @property
    def digest(self) -> str:
        return sha256_digest(self.to_bytes())

    def files(self) -> list[FileRecord]:
        """Every file of every unit (each path once: :meth:`__post_init__` checks it)."""
        return [entry for unit in self.units for entry in unit.files]

    def blobs(self) -> list[FileRecord]:
        """One file per distinct blob (digest)."""
        return list({f.digest: f for f in self.files()}.values())

    @classmethod
    def from_bytes(cls, data: bytes, what: str, digest: str | None = None) -> Manifest:
        """Parse and check a manifest; with ``digest``, also that the bytes hash to it."""
        if digest is not None and sha256_digest(data) != digest:
            raise StoreDataInvalid(f"{what}: its bytes do not hash to {digest}")
        raw = parse_canonical(data, what)
        if isinstance(raw, dict) and raw.get("schema") != MANIFEST_SCHEMA:
            raise StoreDataInvalid(
                f"{what}: unknown manifest schema {ascii(raw.get('schema'))[:60]}"
            )
        optional = {"weights"} & set(raw) if isinstance(raw, dict) else set()
        raw = _fields(raw, {"schema", "name", "recipe", "units", *optional}, what)
        name, recipe, units = raw["name"], raw["recipe"], raw["units"]
        if not isinstance(name, str) or not REF_PART.match(name):
            raise StoreDataInvalid(f"{what}: its name {ascii(name)[:60]} is not a recipe name")
        if not isinstance(recipe, dict) or not isinstance(units, list):
            raise StoreDataInvalid(f"{what}: needs a recipe object and a units list")
        parsed = tuple(UnitRecord.from_json(u, what) for u in units)
        weights = None if "weights" not in raw else _weights(raw["weights"], f"{what}: weights")
        try:
            return cls(name, recipe, parsed, weights)
        except StoreDataInvalid as exc:
            raise StoreDataInvalid(f"{what}: {exc}") from None


@dataclass(frozen=True)
class RefMove:
    """One recorded move of a ref: when (seconds since the epoch), to which manifest, from which
    (None: the ref was new)."""

    time: float
    manifest: str
    previous: str | None

    def to_json(self) -> dict[str, Any]:
        return {"time": self.time, "manifest": self.manifest, "previous": self.previous}

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    @classmethod
    def from_bytes(cls, data: bytes, what: str) -> RefMove:
        raw = _fields(parse_canonical(data, what), {"time", "manifest", "previous"}, what)
        when, previous = raw["time"], raw["previous"]
        if not isinstance(when, float) or when < 0:
            raise StoreDataInvalid(f"{what}: impossible time {ascii(when)[:40]}")
        return cls(
            when,
            check_digest(raw["manifest"], what),
            None if previous is None else check_digest(previous, what),
        )


@dataclass(frozen=True)
class UnitTiming:
    """How long one unit took to compile: its ``key``, its ``shape`` (the digest of its key
    factors without toolchain, environment and schema: see :mod:`neuronbuild.orchestrate.costs`) and
    ``seconds`` of wall time. Later builds of the same shape read it to balance shards."""

    key: str
    shape: str
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": TIMING_SCHEMA,
            "key": self.key,
            "shape": self.shape,
            "seconds": self.seconds,
        }

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    @classmethod
    def from_bytes(cls, data: bytes, what: str) -> UnitTiming:
        raw = _fields(parse_canonical(data, what), {"schema", "key", "shape", "seconds"}, what)
        if raw["schema"] != TIMING_SCHEMA:
            raise StoreDataInvalid(f"{what}: unknown timing schema {ascii(raw['schema'])[:60]}")
        seconds = raw["seconds"]
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, int | float)
            or not 0 <= seconds <= MAX_TIMING_SECONDS
        ):
            raise StoreDataInvalid(f"{what}: impossible seconds {ascii(seconds)[:40]}")
        return cls(check_digest(raw["key"], what), check_digest(raw["shape"], what), float(seconds))
