"""Failures keep finished work (issue 18 item 8): a phase that fails after some graphs completed
keeps their entries as seed records, never as a published unit, and a rerun compiles only what
failed; run against the neuron double, which compiles a phase graph by graph."""

from __future__ import annotations

from pathlib import Path

import pytest

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
