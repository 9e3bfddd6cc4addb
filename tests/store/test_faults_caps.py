"""A writer refuses what its readers refuse (issue 19): a unit record over the readers' cap is
never published, and a timing readers would refuse is never recorded."""

from __future__ import annotations

from pathlib import Path

import pytest

import neuronbuild.store.cas as cas
from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.errors import UserError
from neuronbuild.store.cas import Store
from neuronbuild.store.records import MAX_TIMING_SECONDS, FileRecord, UnitRecord, UnitTiming

KEY = "sha256:" + "1" * 64
SHAPE = "sha256:" + "2" * 64


def test_a_unit_record_over_the_readers_cap_is_refused_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    blob = tmp_path / "neff"
    blob.write_bytes(b"graph")
    [(digest, size)] = store.put_files([blob])
    files = tuple(FileRecord(f"entry/f{i}", digest, size) for i in range(40))
    factors = {"phase": "decode"}
    record = UnitRecord(sha256_digest(canonical_json(factors)), factors, (), files, {})
    monkeypatch.setattr(cas, "MAX_RECORD_BYTES", len(record.to_bytes()) - 1)
    with pytest.raises(UserError, match=r"unit .* record of \d+ bytes \(40 files\), over the"):
        store.put_unit(record)
    assert store.get_unit(record.key) is None
    monkeypatch.setattr(cas, "MAX_RECORD_BYTES", len(record.to_bytes()))
    assert store.put_unit(record) == record == store.get_unit(record.key)  # at the cap: published


def test_a_timing_readers_would_refuse_is_not_recorded(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    store.put_timing(UnitTiming(KEY, SHAPE, MAX_TIMING_SECONDS + 1))
    assert store.timings([SHAPE]) == []
    store.put_timing(UnitTiming(KEY, SHAPE, MAX_TIMING_SECONDS))
    assert [t.seconds for t in store.timings([SHAPE])] == [MAX_TIMING_SECONDS]
