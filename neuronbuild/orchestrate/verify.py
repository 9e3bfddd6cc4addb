"""``neuronbuild verify``: is everything a manifest references present, the right size, intact?"""

from __future__ import annotations

from dataclasses import dataclass, field

from neuronbuild.orchestrate.unit_state import diagnose_units
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord


@dataclass
class VerifyReport:
    """Problems found, one line each with the object's URL; empty when the manifest is sound."""

    manifest: str
    blobs: int
    bytes: int
    deep: bool
    problems: list[str] = field(default_factory=list)
    unit_states: dict[str, str] = field(default_factory=dict)
    """Each unit's :class:`~neuronbuild.orchestrate.unit_state.UnitState` value, by key."""
    corrupt: list[FileRecord] = field(default_factory=list)
    """Blobs whose bytes do not hash to their digest (``deep`` only), one per digest."""
    removed: list[str] = field(default_factory=list)
    """The digests of the corrupt blobs :func:`remove_corrupt` removed."""

    def to_json(self) -> dict[str, object]:
        """``verify --json`` less its ``store`` (``neuronbuild/schemas/verify.json``)."""
        return {
            "manifest": self.manifest,
            "n_blobs": self.blobs,
            "bytes": self.bytes,
            "deep": self.deep,
            "ok": not self.problems,
            "problems": self.problems,
            "unit_states": self.unit_states,
            "corrupt": [f.digest for f in self.corrupt],
            "removed": self.removed,
        }


def verify_manifest(
    store: Store, digest: str, *, deep: bool = False, jobs: int = 8
) -> VerifyReport:
    """Check manifest ``digest``: its unit records stored and readable, every blob present with
    its size (bytes); with ``deep``, every blob re-hashed through the store's verifying reader.
    Each unit's state is the one ``doctor`` and ``status`` report (:func:`diagnose_units`).

    Raises:
        UserError: no such manifest. StoreDataInvalid: the manifest itself is malformed, or
            describes a layout no folder can hold (the same checks ``serve`` applies).
    """
    manifest = store.get_manifest(digest)
    files = manifest.blobs()
    report = VerifyReport(digest, len(files), sum(e.size for e in files), deep)
    health = diagnose_units(
        store,
        [u.key for u in manifest.units],
        sealed={u.key: u for u in manifest.units},
        sealed_in=digest,
        deep=deep,
        jobs=jobs,
    )
    report.unit_states = {key: unit.state.value for key, unit in health.items()}
    bad = {digest for unit in health.values() for digest in unit.corrupt}
    report.corrupt = [f for f in files if f.digest in bad]
    # A blob two units share is one problem.
    report.problems = list(dict.fromkeys(p for unit in health.values() for p in unit.problems))
    return report


def remove_corrupt(store: Store, report: VerifyReport) -> None:
    """``verify --deep --repair``: remove each blob of ``report.corrupt`` from ``store``, recorded
    in ``report.removed``. Its units are then not cached: the next ``compile`` of the recipe
    rebuilds them, and ``push --from`` a store that holds the blob whole copies it back (push
    copies the blobs a store lacks). A blob is removed only after it was found corrupt in this
    run; one that reads whole again is kept (another writer replaced it since).

    Raises:
        Unsupported: the store refuses deletes (a registry's setting, named). StoreError: the
            store failed; what was removed stays removed.
    """
    for file in report.corrupt:
        if store.check_blob(file) is None:
            continue
        store.delete_blob(file)
        report.removed.append(file.digest)


def merged_reports(index: str, reports: list[VerifyReport]) -> VerifyReport:
    """One report for index ``index`` from its entries' ``reports``: their blobs, bytes,
    problems, unit states and corrupt and removed blobs together (``verify --json`` of an
    index)."""
    merged = VerifyReport(
        index,
        sum(r.blobs for r in reports),
        sum(r.bytes for r in reports),
        reports[0].deep,
    )
    for report in reports:
        merged.problems += report.problems
        merged.unit_states.update(report.unit_states)
        merged.corrupt += report.corrupt
        merged.removed += report.removed
    return merged
