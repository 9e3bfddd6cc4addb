"""``push``/``pull`` and ``verify``'s claims, one regression each (issue 19): a copy moves only
what the target lacks (a rerun resumes), never passes on a corrupt blob, and seals the manifest
in the target only after everything it uses; ``verify`` names a missing unit record and a short
blob, and with ``--deep`` a blob whose bytes changed. The breaks they kill are named in
``tests/claim_breaks.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronbuild.errors import StoreDataInvalid, StoreError
from neuronbuild.orchestrate.verify import verify_manifest
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest
from neuronbuild.store.transfer import copy_manifest
from tests.lib.builders import stored_unit


def two_files(store: Store, tmp_path: Path) -> Manifest:
    """A sealed manifest of two units, one file each."""
    units = tuple(
        store.put_unit(stored_unit(store, tmp_path, c, f"x/{c.decode()}"))
        for c in (b"first", b"second")
    )
    manifest = Manifest("app", {}, units)
    store.put_manifest(manifest)
    return manifest


def test_a_copy_moves_only_what_the_target_lacks_and_a_rerun_moves_nothing(
    tmp_path: Path,
) -> None:
    src = Store(str(tmp_path / "src"), create=True)
    manifest = two_files(src, tmp_path)
    dst = Store(str(tmp_path / "dst"), create=True)
    first, second = manifest.files()
    dst.put_file(src.layout.blob(first.digest))  # one blob already there
    report = copy_manifest(src, dst, manifest.digest)
    assert (report.copied, report.skipped, report.bytes) == (1, 1, second.size)
    assert not verify_manifest(dst, manifest.digest, deep=True).problems
    again = copy_manifest(src, dst, manifest.digest)
    assert (again.copied, again.skipped, again.bytes) == (0, 2, 0)


def test_a_corrupt_source_blob_is_never_copied_and_the_target_is_not_sealed(
    tmp_path: Path,
) -> None:
    src = Store(str(tmp_path / "src"), create=True)
    manifest = two_files(src, tmp_path)
    [_, second] = manifest.files()
    Path(src.layout.blob(second.digest)).write_bytes(b"SECOND")  # same size, other bytes
    dst = Store(str(tmp_path / "dst"), create=True)
    with pytest.raises(StoreDataInvalid, match="corrupt"):
        copy_manifest(src, dst, manifest.digest, jobs=1)
    assert dst.missing_blobs([second]) == [second]
    assert not dst.has_manifest(manifest.digest)


def test_a_copy_interrupted_before_the_manifest_leaves_no_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publish order: blobs, unit records, then the manifest, so a copy that dies while writing
    unit records leaves no manifest naming what the target lacks."""
    src = Store(str(tmp_path / "src"), create=True)
    manifest = two_files(src, tmp_path)
    dst = Store(str(tmp_path / "dst"), create=True)
    written: list[str] = []

    def dies_on_the_second(record: object) -> object:
        written.append("unit")
        if len(written) == 2:
            raise StoreError("connection reset")
        return record

    monkeypatch.setattr(dst, "put_unit", dies_on_the_second)
    with pytest.raises(StoreError):
        copy_manifest(src, dst, manifest.digest)
    assert not dst.has_manifest(manifest.digest)


def test_verify_names_a_missing_unit_record_and_a_short_blob(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    manifest = two_files(store, tmp_path)
    first, second = manifest.units
    store.backend.delete(store.layout.unit(first.key))
    Path(store.layout.blob(second.files[0].digest)).write_bytes(b"short")
    report = verify_manifest(store, manifest.digest)
    assert len(report.problems) == 2 and report.to_json()["ok"] is False
    assert f"unit record {first.key} is missing" in report.problems[0]
    assert f"missing or not {second.files[0].size} bytes" in report.problems[1]


def test_only_a_deep_verify_finds_a_blob_whose_bytes_changed(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    manifest = two_files(store, tmp_path)
    [first, _] = manifest.files()
    Path(store.layout.blob(first.digest)).write_bytes(b"FIRST")
    assert verify_manifest(store, manifest.digest).to_json()["ok"] is True
    deep = verify_manifest(store, manifest.digest, deep=True)
    assert len(deep.problems) == 1 and deep.to_json()["ok"] is False
    assert (deep.blobs, deep.bytes) == (2, len(b"first") + len(b"second"))
