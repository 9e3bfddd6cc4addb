"""``neuronbuild verify``: is everything a manifest references present, the right size, intact?"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from neuronbuild.manifest import FileEntry
from neuronbuild.store import Store, hash_stream


@dataclass
class VerifyReport:
    """Problems found, one line each with the object's URL; empty when the manifest is sound."""

    manifest: str
    files: int
    bytes: int
    deep: bool
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {
            "manifest": self.manifest,
            "files": self.files,
            "bytes": self.bytes,
            "deep": self.deep,
            "ok": not self.problems,
            "problems": self.problems,
        }


def _rehash(store: Store, entry: FileEntry) -> str | None:
    with store.storage.open_read(store.blob_path(entry.digest)) as f:
        digest, _ = hash_stream(f)
    if digest != entry.digest:
        return f"{store.blob_url(entry.digest)}: corrupt (its bytes hash to {digest})"
    return None


def verify_manifest(
    store: Store, digest: str, *, deep: bool = False, jobs: int = 8
) -> VerifyReport:
    """Check manifest ``digest``: its unit records and every blob present with its size (bytes);
    with ``deep``, every blob re-hashed.

    Raises:
        UserError: no such manifest. StoreDataInvalid: the manifest itself is malformed.
    """
    manifest = store.get_manifest(digest)
    entries = list({f.digest: f for f in manifest.files()}.values())
    report = VerifyReport(digest, len(entries), sum(e.size for e in entries), deep)
    for unit in manifest.units:
        if not store.storage.exists(store.unit_path(unit.key)):
            report.problems.append(f"{store.url}: unit record {unit.key} is missing")
    missing = store.missing_blobs(entries, workers=jobs)
    report.problems += [
        f"{store.blob_url(e.digest)}: missing or not {e.size} bytes ({e.path})" for e in missing
    ]
    if deep:
        present = [e for e in entries if e not in missing]
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            report.problems += [p for p in pool.map(lambda e: _rehash(store, e), present) if p]
    return report
