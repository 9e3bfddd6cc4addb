"""Failures keep finished work (issue 18 item 8): a phase that fails after some graphs completed
keeps their entries as seed records, never as a published unit, and a rerun compiles only what
failed; run against the neuron double, which compiles a phase graph by graph."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronbuild.keys import UnitKey
from neuronbuild.plan import build_plan
from neuronbuild.store.cas import Store
from tests.engines.test_neuron_engine import (  # noqa: F401 (double: a fixture)
    compile_small,
    compiled_graphs,
    double,
    setenv,
    small_recipe,
)


@pytest.mark.slow
def test_each_rerun_compiles_only_what_the_failed_runs_did_not_finish(
    double: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recipe = small_recipe(tmp_path, vision=False)  # prefill 128, 256, 1024; 4 decode graphs
    store = Store(str(tmp_path / "store"), create=True)
    [prefill, _] = build_plan(recipe).units

    def run(fail: str | None) -> list[str]:
        setenv(monkeypatch, "NEURON_DOUBLE_FAIL", fail)
        double.unlink(missing_ok=True)
        report = compile_small(recipe, store, tmp_path, jobs=1)
        assert report.failed == (fail is not None)
        return [g for g in compiled_graphs(double) if g.startswith("prefill")]

    assert run("ncc:256") == ["prefill 128 0"]  # 256 failed: 128 finished
    assert store.get_ref(recipe.name, "latest") is None
    assert not store.has_unit(prefill.key.digest)  # kept, not published
    assert run("ncc:1024") == ["prefill 256 0"]  # 128 reused
    assert run(None) == ["prefill 1024 0"]  # 128 and 256 reused
    manifest = store.get_manifest(str(store.get_ref(recipe.name, "latest")))
    [record] = [u for u in manifest.units if u.key == prefill.key.digest]
    entries = {f.path.split("/")[2] for f in record.files} - {"nki", ".nki-intermediate-cache"}
    assert len(entries) == 3


def test_the_trace_pool_counts_in_host_memory_sizing(
    double: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Row A11: extraction forks ``VLLM_NEURON_PARALLEL_TRACE_WORKERS`` children per rank, about
    4 GiB each, before any neuronx-cc process runs."""
    from neuronbuild.engines.neuron import compile as neuron_compile

    monkeypatch.setattr(neuron_compile, "host_cores", lambda: 16)
    recipe = small_recipe(tmp_path, vision=False)
    plan = build_plan(recipe)
    compiler = plan.engine.compiler()

    def sized(memory_gib: float) -> tuple[int, str]:
        monkeypatch.setattr(neuron_compile, "host_memory_gib", lambda: memory_gib)
        at_once, _ = compiler.concurrency(recipe, 3, 3)
        env = compiler.command(recipe, plan.units[0], tmp_path / "scratch").env
        return at_once, env["VLLM_NEURON_PARALLEL_TRACE_WORKERS"]

    assert sized(64.0) == (3, "5")  # 64 GiB / (3 units x 4 GiB)
    assert sized(8.0) == (2, "1")  # neuronx-cc alone would allow 3 units at 0.5 GiB
    setenv(monkeypatch, "VLLM_NEURON_PARALLEL_TRACE_WORKERS", "4")
    assert sized(32.0) == (2, "4")  # the user's pool is kept and sizes the units at once


@pytest.mark.slow
def test_a_run_killed_for_memory_is_retried_with_a_smaller_trace_pool(
    double: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setenv(monkeypatch, "VLLM_NEURON_PARALLEL_TRACE_WORKERS", "8")
    setenv(monkeypatch, "NEURON_DOUBLE_FAIL", "oom-trace-above:2")  # 8, then 4, are killed
    recipe = small_recipe(tmp_path, vision=False)
    report = compile_small(recipe, Store(str(tmp_path / "store"), create=True), tmp_path, jobs=1)
    assert report.failed == 0 and report.manifest is not None


def test_status_and_ls_count_seed_records_apart_from_the_units_of_builds(
    tmp_path: Path,
) -> None:
    """Issue 46 item 13: a failed run's seed records are no published unit."""
    import json

    from neuronbuild.orchestrate.seeds import SEED_SCHEMA
    from neuronbuild.store.records import UnitRecord
    from tests.conftest import cpu_recipe, publish_build
    from tests.lib.commands import neuronbuild_in_process

    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    [built] = store.get_manifest(digest).units
    for generation in (0, 1):
        key = UnitKey({"schema": SEED_SCHEMA, "generation": generation})
        store.put_unit(UnitRecord(key.digest, key.factors, (), built.files, {}))
    store.backend.put(store.layout.unit("sha256:" + "e" * 64), b"not a record")

    for command in ("status", "ls"):
        code, out, err = neuronbuild_in_process(command, "--cache", store.url, "--json")
        assert code == 0, err
        data = json.loads(out)
        assert (data["n_unit_records"], data["n_seed_records"]) == (2, 2)  # 1 built, 1 unreadable
        code, out, err = neuronbuild_in_process(command, "--cache", store.url)
        assert "2 unit records (and 2 seed records of failed runs)," in out
