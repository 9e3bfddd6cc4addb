"""Tests written to kill mutation survivors (``make mutation``) that broke a claim: each names
the mutant it kills. Survivors accepted as equivalent or outside a claim are listed, with the
reason, in tests/README.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronbuild.errors import StoreDataInvalid
from neuronbuild.keys import canonical_json
from neuronbuild.store.cas import RefConflict, Store
from neuronbuild.store.records import RefMove, check_relative_path
from tests.lib.claims import distinct_manifests


@pytest.mark.parametrize("value", [5, 5.0, ["cpu", "x"], {"p": "x"}, True])
def test_a_path_that_is_not_a_string_is_refused_as_unsafe_not_a_traceback(value: object) -> None:
    """Kills records.check_relative_path mutant 1 (``or`` made ``and``: a number passed the
    first check and crashed on ``.encode``)."""
    with pytest.raises(StoreDataInvalid, match="unsafe path"):
        check_relative_path(value, "m")


@pytest.mark.parametrize("when", ["yesterday", None, [1.0], 5, True])
def test_a_history_entry_whose_time_is_not_a_number_is_bad_data_not_a_traceback(
    when: object,
) -> None:
    """Kills records.RefMove.from_bytes mutant 23 (``or`` made ``and``: a string time reached
    ``when < 0`` and raised TypeError, a traceback instead of exit 2)."""
    raw = {"manifest": "sha256:" + "a" * 64, "previous": None, "time": when}
    with pytest.raises(StoreDataInvalid, match="impossible time"):
        RefMove.from_bytes(canonical_json(raw), "entry")


def test_set_ref_gives_up_after_its_attempts_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills cas.Store.set_ref mutants 16 and 17: when every compare-and-swap loses, set_ref
    raises after exactly ``attempts`` tries (never returns as if the ref had moved, never gives
    up early)."""
    store = Store(str(tmp_path / "store"), create=True)
    [digest] = distinct_manifests(store, tmp_path, 1)
    tries: list[str | None] = []

    def always_overtaken(
        name: str, tag: str, target: str, expected: str | None, check: object = None
    ) -> None:
        tries.append(expected)
        raise RefConflict(f"{name}/{tag} moved while moving it")

    monkeypatch.setattr(store, "move_ref", always_overtaken)
    monkeypatch.setattr("time.sleep", lambda seconds: None)
    with pytest.raises(RefConflict):
        store.set_ref("app", "latest", digest, attempts=4)
    assert len(tries) == 4
    assert store.get_ref("app", "latest") is None


def test_a_ref_written_by_hand_keeps_the_recorded_moves_before_it(tmp_path: Path) -> None:
    """Kills cas.Store.ref_chain mutants 16, 18 and 20: a ref that reached its manifest without
    a recorded move (written by hand, or by a version that kept no history) still has the moves
    recorded before it, oldest first, none of them off the chain."""
    store = Store(str(tmp_path / "store"), create=True)
    a, b, c = distinct_manifests(store, tmp_path, 3)
    store.move_ref("app", "latest", a, None)
    store.move_ref("app", "latest", b, a)
    store.backend.put(store.layout.ref("app", "latest"), (c + "\n").encode())  # by hand
    chain, off = store.ref_chain("app", "latest")
    assert [(m.previous, m.manifest) for _, m in chain] == [(None, a), (a, b)]
    assert off == []


def test_a_blob_is_fetched_into_a_folder_that_does_not_exist_yet(tmp_path: Path) -> None:
    """Kills cas.Store.fetch_blob mutants 3, 5 and 7 (``parents=True`` dropped): a node's lay-out
    nests a blob several folders deep under a root that is not there yet."""
    store = Store(str(tmp_path / "store"), create=True)
    [digest] = distinct_manifests(store, tmp_path, 1)
    record = store.get_manifest(digest).files()[0]
    dest = tmp_path / "node" / "deep" / "er" / "blob"
    store.fetch_blob(record, dest)
    assert dest.stat().st_size == record.size
