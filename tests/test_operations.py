"""Store operations: gc (mark and sweep), doctor, status."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from neuronbuild.gc import collect_garbage
from neuronbuild.store import Store
from neuronbuild.verify import verify_manifest
from tests.conftest import cpu_recipe, publish_build

LATER = time.time() + 10 * 86400


def blob_count(store: Store) -> int:
    return len(store.storage.find(store._path("blobs")))


def test_unreachable_objects_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    live = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    orphan = publish_build(store, cpu_recipe(cpu_isa="host", name="orphan", seed=1), tmp_path, "b")
    store.storage.delete(store.ref_path("orphan", "latest"))
    before = blob_count(store)

    dry = collect_garbage(store, dry_run=True, now=LATER)
    assert set(dry.deleted) == {"manifests", "units", "blobs"}
    assert blob_count(store) == before

    young = collect_garbage(store, now=time.time())
    assert not young.deleted

    swept = collect_garbage(store, now=LATER)
    assert swept.deleted["manifests"] == [store.manifest_path(orphan)]
    assert blob_count(store) == before - 2
    assert not verify_manifest(store, live, deep=True).problems


def test_keep_last_limits_what_a_ref_history_keeps_alive(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    old = publish_build(store, cpu_recipe(cpu_isa="host", seed=1), tmp_path, "a")
    new = publish_build(store, cpu_recipe(cpu_isa="host", seed=2), tmp_path, "b")
    assert store.get_ref("tiny", "latest") == new

    kept = collect_garbage(store, now=LATER)
    assert not kept.deleted
    collect_garbage(store, keep_last=1, now=LATER)
    assert not store.storage.exists(store.manifest_path(old))
    assert not verify_manifest(store, new, deep=True).problems


def test_doctor_names_the_factor_that_makes_a_unit_miss(tmp_path: Path) -> None:
    from neuronbuild.doctor import diagnose
    from neuronbuild.recipe import parse_recipe

    store = Store(str(tmp_path / "store"))
    publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    [hit] = diagnose(parse_recipe(cpu_recipe(cpu_isa="host")), store)
    assert hit.held and not hit.differences
    [miss] = diagnose(parse_recipe(cpu_recipe(cpu_isa="host", max_model_len=512)), store)
    assert not miss.held
    assert miss.differences == ["engine_args.max_model_len: recipe 512, manifest 256"]


def test_status_counts_built_and_missing_graphs_per_kind(tmp_path: Path, write_recipe: Any) -> None:
    store = Store(str(tmp_path / "store"))
    data = cpu_recipe(cpu_isa="host")
    digest = publish_build(store, data, tmp_path, "a")
    for recipe, built in ((data, 1), (cpu_recipe(cpu_isa="host", max_num_seqs=8), 0)):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "neuronbuild",
                "status",
                str(write_recipe(recipe)),
                "--cache",
                store.url,
                "--json",
            ],
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stderr
        info = json.loads(result.stdout)["recipe"]
        assert info["graphs"] == {"dynamic": {"built": built, "missing": 1 - built}}
        assert info["latest"] == digest
