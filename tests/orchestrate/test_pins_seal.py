"""Pins (issue 46 item 18) of the claims sealing carries, each with a fast in-process test that
fails when its check is removed or inverted: only a complete build is sealed (a unit whose
record or one of whose blobs is missing is named, with the shard that owns it, and nothing is
written); a refused move of one recipe's ref moves no other recipe's ref; two recipes of one
name are refused before anything is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import RefNotExpected, UserError
from neuronbuild.orchestrate.seal import seal_plans
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.moves import Ask
from tests.lib.builders import cpu_recipe, publish_build, recipe_source


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "store"), create=True)


def plan_of(tmp_path: Path, **args: Any) -> Plan:
    return build_plan(parse_recipe(cpu_recipe(**args), recipe_source(tmp_path)))


def published(store: Store, tmp_path: Path, **args: Any) -> Plan:
    """The plan of ``cpu_recipe(**args)``, its build published (``<name>/latest`` moved)."""
    publish_build(store, cpu_recipe(**args), tmp_path, str(args))
    return plan_of(tmp_path, **args)


def written(store: Store) -> tuple[dict[str, str], list[str]]:
    """The store's refs and the files under its manifests' folder (what a seal writes)."""
    root = Path(store.layout.folder("manifests"))
    files = sorted(str(p) for p in root.rglob("*") if p.is_file()) if root.exists() else []
    return store.refs(), files


def test_a_build_whose_blob_is_missing_is_named_and_not_sealed(
    store: Store, tmp_path: Path
) -> None:
    plan = published(store, tmp_path, name="a")
    record = store.get_units([plan.units[0].key.digest])[plan.units[0].key.digest]
    lost = record.files[0]
    os.remove(store.layout.blob(lost.digest))
    before = written(store)
    report = seal_plans([plan], store, tag="fresh")
    assert not report.sealed
    assert [(m.key, m.why) for m in report.missing] == [
        (plan.units[0].key.digest, f"the blob of {lost.path} is missing")
    ]
    assert written(store) == before and store.get_ref("a", "fresh") is None


def test_a_build_whose_unit_record_is_missing_is_named_with_its_shard_and_not_sealed(
    store: Store, tmp_path: Path
) -> None:
    published(store, tmp_path, name="a")
    plan = plan_of(tmp_path, name="a", max_num_seqs=2)  # its units never compiled
    before = written(store)
    report = seal_plans([plan], store, tag="fresh", shards=2)
    assert not report.sealed
    assert [m.key for m in report.missing] == [u.key.digest for u in plan.units]
    assert {m.why for m in report.missing} == {"no unit record"}
    assert all(m.shard in (0, 1) for m in report.missing)
    assert written(store) == before


def test_a_refused_move_of_one_recipes_ref_moves_no_other_ref(store: Store, tmp_path: Path) -> None:
    first = published(store, tmp_path, name="a")
    second = published(store, tmp_path, name="b", max_num_seqs=2)
    latest = store.get_ref("b", "latest")
    assert latest is not None
    store.set_ref("b", "fresh", latest)  # --expect none refuses b
    with pytest.raises(RefNotExpected):
        seal_plans([first, second], store, tag="fresh", ask=Ask(expect=None))
    assert store.get_ref("a", "fresh") is None


def test_seal_refuses_two_recipes_of_one_name_before_writing_anything(
    store: Store, tmp_path: Path
) -> None:
    one = published(store, tmp_path, name="same")
    two = published(store, tmp_path, name="same", max_num_seqs=2)
    before = written(store)
    with pytest.raises(UserError, match="name 'same'"):
        seal_plans([one, two], store, tag="fresh")
    assert written(store) == before and store.get_ref("same", "fresh") is None
