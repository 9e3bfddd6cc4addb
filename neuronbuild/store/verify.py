"""``neuronbuild verify``: is everything a manifest references present, the right size, intact?"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from neuronbuild.store.cas import Store


@dataclass
class VerifyReport:
    """Problems found, one line each with the object's URL; empty when the manifest is sound."""

    manifest: str
    blobs: int
    bytes: int
    deep: bool
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        """``verify --json`` less its ``store`` (``neuronbuild/schemas/verify.json``)."""
        return {
            "manifest": self.manifest,
            "n_blobs": self.blobs,
            "bytes": self.bytes,
            "deep": self.deep,
            "ok": not self.problems,
            "problems": self.problems,
        }


def verify_manifest(
    store: Store, digest: str, *, deep: bool = False, jobs: int = 8
) -> VerifyReport:
    """Check manifest ``digest``: its unit records and every blob present with its size (bytes);
    with ``deep``, every blob re-hashed through the store's verifying reader.

    Raises:
        UserError: no such manifest. StoreDataInvalid: the manifest itself is malformed, or
            describes a layout no folder can hold (the same checks ``serve`` applies).
    """
    manifest = store.get_manifest(digest)
    files = manifest.blobs()
    report = VerifyReport(digest, len(files), sum(e.size for e in files), deep)
    for unit in manifest.units:
        if not store.has_unit(unit.key):
            report.problems.append(f"{store.url}: unit record {unit.key} is missing")
    missing = store.missing_blobs(files, workers=jobs)
    report.problems += [
        f"{store.blob_url(e.digest)}: missing or not {e.size} bytes ({e.path})" for e in missing
    ]
    if deep:
        present = [e for e in files if e not in missing]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            report.problems += [p for p in pool.map(store.check_blob, present) if p]
    return report
