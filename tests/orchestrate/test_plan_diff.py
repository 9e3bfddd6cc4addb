"""``plan NEW --diff OLD`` (issue 44 item 3): the graphs a change of recipe compiles again, why, and
what that costs from the compile times the store recorded, before anything compiles."""

from __future__ import annotations

import json
from pathlib import Path

from neuronbuild.orchestrate.costs import unit_shape
from neuronbuild.plan import build_plan
from neuronbuild.store.cas import Store
from neuronbuild.store.records import UnitTiming
from tests.engines.test_neuron_releases import release_recipe
from tests.lib.commands import neuronbuild


def test_an_sdk_upgrade_compiles_every_graph_priced_by_the_last_releases_times(
    tmp_path: Path,
) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = release_recipe(tmp_path / "old", "2.33.1")
    new = release_recipe(tmp_path / "new", "2.34.0")
    store = Store(str(tmp_path / "store"), create=True)
    for i, unit in enumerate(build_plan(old).units):  # what building 2.33.1 took
        for seconds in (600.0 * (i + 1), 600.0 * (i + 1) + 60, 600.0 * (i + 1) + 120):
            key = f"sha256:{i}{int(seconds):063d}"
            store.put_timing(UnitTiming(key, unit_shape(unit), seconds))
    done = neuronbuild("plan", new.source, "--diff", old.source, "--cache", store.url, "--json")
    assert done.returncode == 0, done.stderr
    diff = json.loads(done.stdout)["diff"]
    graphs = len(build_plan(new).graphs)
    assert (diff["n_graphs_changed"], diff["n_graphs_reused"]) == (graphs, 0)
    assert [u["seconds"] for u in diff["units"]] == [660.0, 1260.0, 1860.0][: len(diff["units"])]
    assert {u["recorded"] for u in diff["units"]} == {True}
    assert {tuple(u["why"]) for u in diff["units"]} == {("toolchain",)}
    assert diff["seconds"] == sum(u["seconds"] for u in diff["units"])
    text = neuronbuild("plan", new.source, "--diff", old.source, "--cache", store.url).stdout
    assert f"against {old.source}: {graphs} graphs compile" in text
    assert "recorded  toolchain" in text
    assert f"({len(diff['units'])} of {len(diff['units'])} units from recorded times" in text


def test_a_new_bucket_compiles_only_its_new_graphs_and_without_times_is_estimated(
    tmp_path: Path,
) -> None:
    (tmp_path / "old").mkdir()
    (tmp_path / "new").mkdir()
    old = release_recipe(tmp_path / "old", "2.34.0")
    new = release_recipe(  # a new decode batch
        tmp_path / "new", "2.34.0", neuron_config={"num_seqs_buckets": [1, 2, 4]}
    )
    done = neuronbuild("plan", new.source, "--diff", old.source, "--json")
    assert done.returncode == 0, done.stderr
    diff = json.loads(done.stdout)["diff"]
    # vLLM-Neuron's units are phases of the whole configuration: both keys change, but the
    # previous build seeds every graph it had (same target, toolchain and phase).
    prefill, decode = diff["units"]
    assert (prefill["n_graphs_seeded"], prefill["seconds"]) == (len(prefill["graphs"]), 0.0)
    assert (len(decode["graphs"]), decode["n_graphs_seeded"]) == (6, 4)  # batch 2: 2 graphs new
    assert decode["seconds"] > 0 and decode["recorded"] is False  # no times: the estimate
    assert diff["n_graphs_changed"] == 2 and diff["n_graphs_dropped"] == 0
    assert decode["why"] == ["engine_args"]
