"""Store operations: gc (mark and sweep), doctor, status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from neuronbuild import schemas
from neuronbuild.orchestrate.verify import verify_manifest
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from tests.conftest import cpu_recipe, publish_build
from tests.conftest import neuronbuild as nb

LATER = time.time() + 10 * 86400


def blob_count(store: Store) -> int:
    return len(store.backend.find(store.layout.folder("blobs")))


def test_unreachable_objects_are_swept_and_live_ones_kept(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    live = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    orphan = publish_build(store, cpu_recipe(cpu_isa="host", name="orphan", seed=1), tmp_path, "b")
    store.backend.delete(store.layout.ref("orphan", "latest"))
    before = blob_count(store)

    dry = collect_garbage(store, dry_run=True, now=LATER)
    assert set(dry.deleted) == {"manifests", "units", "blobs", "locks"}  # the lock of a gone ref
    assert blob_count(store) == before

    young = collect_garbage(store, now=time.time())
    assert not young.deleted

    swept = collect_garbage(store, now=LATER)
    assert swept.deleted["manifests"] == [store.layout.manifest(orphan)]
    assert blob_count(store) == before - 2
    assert not verify_manifest(store, live, deep=True).problems


def test_a_timing_goes_with_its_unit_and_a_live_units_timing_stays(tmp_path: Path) -> None:
    from neuronbuild.store.records import UnitTiming

    store = Store(str(tmp_path / "store"), create=True)
    live = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    [live_key] = [u.key for u in store.get_manifest(live).units]
    dead_key = "sha256:" + "d" * 64
    for key in (live_key, dead_key):
        store.put_timing(UnitTiming(key, "sha256:" + "5" * 64, 12.5))

    assert not collect_garbage(store, now=time.time()).deleted  # young: kept
    swept = collect_garbage(store, now=LATER)
    assert swept.deleted["timings"] == [store.layout.timing("sha256:" + "5" * 64, dead_key)]
    assert [t.key for t in store.timings({"sha256:" + "5" * 64})] == [live_key]

    store.put_timing(UnitTiming(dead_key, "sha256:" + "5" * 64, 3.0))
    written = tmp_path / "store" / store.layout.timing("sha256:" + "5" * 64, dead_key)
    os.utime(written, (time.time() - 60, time.time() - 60))  # older than 0 s, whatever the clock
    swept_json = nb("gc", "--older-than", "0", "--json", "--cache", store.url)
    assert swept_json.returncode == 0, swept_json.stderr
    document = json.loads(swept_json.stdout)
    jsonschema.validate(document, schemas.load("gc"))
    assert document["n_deleted_by_kind"] == {"timings": 1}


def test_keep_last_limits_what_a_ref_history_keeps_alive(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    old = publish_build(store, cpu_recipe(cpu_isa="host", seed=1), tmp_path, "a")
    new = publish_build(store, cpu_recipe(cpu_isa="host", seed=2), tmp_path, "b")
    assert store.get_ref("tiny", "latest") == new

    kept = collect_garbage(store, now=LATER)
    assert not kept.deleted
    collect_garbage(store, keep_last=1, now=LATER)
    assert not store.backend.exists(store.layout.manifest(old))
    assert not verify_manifest(store, new, deep=True).problems


def test_doctor_names_the_factor_that_makes_a_unit_miss(tmp_path: Path) -> None:
    from neuronbuild.orchestrate.doctor import diagnose
    from neuronbuild.recipe import parse_recipe

    store = Store(str(tmp_path / "store"), create=True)
    publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    [hit] = diagnose(parse_recipe(cpu_recipe(cpu_isa="host")), store)
    assert hit.cached and not hit.differences
    [miss] = diagnose(parse_recipe(cpu_recipe(cpu_isa="host", max_model_len=512)), store)
    assert not miss.cached
    assert miss.differences == ["engine_args.max_model_len: recipe 512, manifest 256"]


def test_status_counts_cached_and_missing_graphs_per_kind(
    tmp_path: Path, write_recipe: Any
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
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
        assert info["n_graphs_by_kind"] == {"dynamic": {"cached": built, "missing": 1 - built}}
        assert info["latest"] == digest


def test_a_young_unreferenced_manifest_keeps_its_old_blobs(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    store.backend.delete(store.layout.ref("tiny", "latest"))
    old = time.time() - 10 * 86400
    for path in store.backend.find(store.root):
        if "/manifests/" not in path:
            os.utime(path, (old, old))
    collect_garbage(store)
    assert not verify_manifest(store, digest, deep=True).problems


def test_tag_promotes_and_rolls_back_by_compare_and_swap(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    first = publish_build(store, cpu_recipe(cpu_isa="host", seed=1), tmp_path, "a")
    second = publish_build(store, cpu_recipe(cpu_isa="host", seed=2), tmp_path, "b")
    promoted = nb("tag", "tiny/latest", "tiny/prod", "--cache", store.url, "--json")
    assert promoted.returncode == 0, promoted.stderr
    assert json.loads(promoted.stdout) == {
        "schema": "neuronbuild.tag/1",
        "store": store.url,
        "ref": "tiny/prod",
        "previous": None,
        "manifest": second,
    }
    rolled = nb("tag", first, "tiny/prod", "--cache", store.url)
    assert rolled.returncode == 0, rolled.stderr
    assert store.get_ref("tiny", "prod") == first
    again = nb("tag", first, "tiny/prod", "--cache", store.url)
    assert again.stdout == f"tiny/prod: already at {first}; nothing moved\n", again.stderr
    listed = json.loads(nb("ls", "--history", "--cache", store.url, "--json").stdout)
    assert listed["refs"] == {"tiny/latest": second, "tiny/prod": first}
    assert [m["manifest"] for m in listed["history"]["tiny/prod"]] == [second, first]
    missing = nb("tag", "sha256:" + "0" * 64, "tiny/prod", "--cache", store.url)
    assert missing.returncode == 2 and "no manifest" in missing.stderr


def test_malformed_ref_history_is_bad_store_data_not_a_traceback(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    store.backend.put(store.layout.history("tiny", "latest") + "/0-bad.json", b"[1]")
    for args in (["ls", "--history"], ["gc", "--dry-run"]):
        result = nb(*args, "--cache", store.url)
        assert result.returncode == 2, (args, result.stderr)
        assert "ref history" in result.stderr and "expected an object" in result.stderr


def test_serve_refuses_a_recipe_that_no_longer_matches_naming_the_factor(
    tmp_path: Path, write_recipe: Any
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    (tmp_path / "model").mkdir()
    publish_build(store, cpu_recipe(cpu_isa="host", model="./model"), tmp_path, "a")
    changed = write_recipe(cpu_recipe(cpu_isa="host", model="./model", max_model_len=512))
    result = nb("serve", str(changed), "--cache", store.url, "--dry-run")
    assert result.returncode == 2
    assert "engine_args.max_model_len: recipe 512, manifest 256" in result.stderr


def test_serve_refuses_a_node_without_the_instruction_set_of_the_artifacts(
    tmp_path: Path,
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    digest = publish_build(
        store, cpu_recipe(cpu_isa="aarch64+sve2", model=str(tmp_path / "model")), tmp_path, "a"
    )
    result = nb("serve", "--manifest", digest, "--cache", store.url, "--dry-run")
    assert result.returncode == 2
    assert "NAME     BUILT FOR     THIS NODE" in result.stderr
    assert "cpu_isa  aarch64+sve2" in result.stderr
    assert "--allow-mismatch cpu_isa" in result.stderr
    allowed = nb(
        "serve",
        "--manifest",
        digest,
        "--cache",
        store.url,
        "--dry-run",
        "--allow-mismatch",
        "cpu_isa",
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "WARNING: --allow-mismatch cpu_isa: serving artifacts built for aarch64+sve2" in (
        allowed.stderr
    )


def test_a_symlink_in_the_layout_cannot_redirect_writes_outside(tmp_path: Path) -> None:
    from neuronbuild.errors import StoreDataInvalid
    from neuronbuild.node.materialize import lay_out
    from neuronbuild.store.tiered import TieredStore

    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    outside = tmp_path / "outside"
    outside.mkdir()
    root = tmp_path / "root"
    root.mkdir()
    (root / "torch_compile_cache").symlink_to(outside)
    try:
        lay_out(store.get_manifest(digest), digest, TieredStore(store), root)
    except StoreDataInvalid as exc:
        assert "escapes" in str(exc)
    else:
        raise AssertionError("lay_out followed a symlink out of its root")
    assert not list(outside.iterdir())


def test_compile_dry_run_of_a_neuron_recipe_says_why_it_cannot_compile_here() -> None:
    from tests.conftest import RECIPES

    result = nb(
        "compile",
        str(RECIPES / "llama-3.3-70b-trn2.yaml"),
        "--cache",
        "/nonexistent/x",
        "--dry-run",
    )
    assert result.returncode == 2
    assert "compiling here would fail" in result.stderr and "Neuron SDK" in result.stderr


def test_a_broken_cpu_install_is_detected_before_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from neuronbuild.engines.vllm_cpu.engine import CpuEngine
    from neuronbuild.errors import UserError

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: object() if name == "torchvision" else real(name, *a),
    )
    with pytest.raises(UserError, match="pip uninstall -y torchvision"):
        CpuEngine().compiler().check_install()
