"""One diagnosis of a unit's state in a store, the one ``doctor``, ``status`` and ``verify`` print.

A unit is *cached* only when its record is stored, readable and every blob it names is present
with its recorded size (what ``compile`` reuses, :meth:`Store.cached_units`); ``deep`` also
re-hashes each present blob (``verify --deep``). Every other state names what is wrong, one line
per object with its URL, so that three commands asked about one unit give one answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum

from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, UnitRecord


class UnitState(str, Enum):
    """A unit's state in a store, worst first when several apply (the record before its blobs)."""

    CACHED = "cached"
    """Record readable, every blob present with its size (and intact, when re-hashed)."""
    NO_RECORD = "no-record"
    """No unit record is stored under the key."""
    RECORD_UNREADABLE = "record-unreadable"
    """A record is stored but is not one (malformed, not canonical, another key's)."""
    BLOB_MISSING = "blob-missing"
    """The record is readable; a blob it names is absent or not its recorded size."""
    BLOB_CORRUPT = "blob-corrupt"
    """Every blob has its size, but one's bytes do not hash to its digest (``deep`` only)."""


@dataclass(frozen=True)
class UnitHealth:
    """One unit's :class:`UnitState` in one store, the lines that say why (empty when cached),
    and the sealed manifest that names the unit (``sealed_in``, a ref or digest; None if none)."""

    key: str
    state: UnitState
    problems: tuple[str, ...] = ()
    sealed_in: str | None = None
    corrupt: tuple[str, ...] = ()
    """The digests of its blobs whose bytes do not hash to them (``deep`` only)."""

    @property
    def cached(self) -> bool:
        """Whether the store holds the unit whole (what compile would reuse)."""
        return self.state is UnitState.CACHED


def diagnose_units(
    store: Store,
    keys: Sequence[str],
    *,
    sealed: Mapping[str, UnitRecord] | None = None,
    sealed_in: str | None = None,
    deep: bool = False,
    jobs: int = 8,
) -> dict[str, UnitHealth]:
    """The health of each unit of ``keys`` in ``store``, by key (in ``keys``' order).

    ``sealed``: the records a sealed manifest holds, by key (``sealed_in`` names that manifest);
    a unit it names is checked against the blobs the manifest lists (what ``serve`` fetches),
    others against their stored record's. Blob sizes are checked in one batch
    (:meth:`Store.missing_blobs`, one listing for many); ``deep`` re-hashes present blobs,
    ``jobs`` at a time.
    """
    sealed = sealed or {}
    records: dict[str, UnitRecord | None] = {}
    unreadable: dict[str, str] = {}
    for key in keys:
        try:
            records[key] = store.get_unit(key)
        except StoreDataInvalid as exc:
            records[key], unreadable[key] = None, str(exc)

    def files_of(key: str) -> tuple[FileRecord, ...]:
        record = sealed.get(key) or records[key]
        return record.files if record is not None else ()

    every = [f for key in keys for f in files_of(key)]
    missing = {f.digest for f in store.missing_blobs(every, workers=jobs)}
    corrupt: dict[str, str] = {}
    if deep:
        present = list({f.digest: f for f in every if f.digest not in missing}.values())
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            found = zip(present, pool.map(store.check_blob, present), strict=True)
            corrupt = {f.digest: problem for f, problem in found if problem}
    out = {}
    for key in keys:
        problems, bad = [], []
        state = UnitState.CACHED
        if key in unreadable:
            state, problems = UnitState.RECORD_UNREADABLE, [unreadable[key]]
        elif records[key] is None:
            state, problems = UnitState.NO_RECORD, [f"{store.url}: unit record {key} is missing"]
        for file in files_of(key):
            if file.digest in missing:
                state = UnitState.BLOB_MISSING if state is UnitState.CACHED else state
                url = store.blob_url(file.digest)
                problems.append(f"{url}: missing or not {file.size} bytes ({file.path})")
            elif file.digest in corrupt:
                state = UnitState.BLOB_CORRUPT if state is UnitState.CACHED else state
                problems.append(corrupt[file.digest])
                bad.append(file.digest)
        where = sealed_in if key in sealed else None
        out[key] = UnitHealth(key, state, tuple(problems), where, tuple(bad))
    return out


def refuse_unreadable(health: Mapping[str, UnitHealth]) -> None:
    """For the commands that only read (``doctor``, ``status``): bad data is reported, never
    taken for a miss.

    Raises:
        StoreDataInvalid: a unit's record cannot be read (its problem line, naming its URL).
    """
    for unit in health.values():
        if unit.state is UnitState.RECORD_UNREADABLE:
            raise StoreDataInvalid(unit.problems[0])
