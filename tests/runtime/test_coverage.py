"""Serve proves coverage before anything else: every graph the recipe's plan needs has a complete
entry in the manifest (fidelity row C8, issue 18 item 6), read from the unit records alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuronbuild.engines.coverage import check_coverage
from neuronbuild.errors import UserError
from neuronbuild.orchestrate.compile import ingest
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest, UnitRecord
from tests.conftest import cpu_recipe, neuron_recipe, serve_without_vllm
from tests.lib.builders import neuron_entries


def neuron_build(
    store: Store, tmp_path: Path, leave_out: str | None = None
) -> tuple[Recipe, Manifest, str]:
    """A neuron recipe (6 prefill, 4 decode graphs) published with one complete entry per graph
    in vLLM-Neuron's layout, less the file named ``leave_out`` (``<phase>/<graph index>/<name>``,
    ``<key>`` for the entry's key)."""
    recipe = parse_recipe(neuron_recipe(name="cover"), "<recipe>")
    records = []
    root = tmp_path / "build"
    for unit in build_plan(recipe).units:
        files = neuron_entries(unit)
        keys = list(dict.fromkeys(f.parent.name for f in files))
        files = [
            f
            for f in files
            if f"{unit.phase}/{keys.index(f.parent.name)}/{f.name.replace(f.parent.name, '<key>')}"
            != leave_out
        ]
        for rel in files:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(json.dumps({"cache_key": rel.parent.name}))
        records.append(ingest(store, unit, root, files, {}))
    manifest = Manifest(recipe.name, recipe.canonical(), tuple(records))
    return recipe, manifest, store.put_manifest(manifest)


def check(recipe: Recipe, units: tuple[UnitRecord, ...], digest: str = "sha256:m") -> None:
    plan = build_plan(recipe)
    check_coverage(plan.engine, [(u.phase, u.graphs) for u in plan.units], units, digest, "cover")


def test_a_manifest_with_every_entry_complete_is_covered(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    recipe, manifest, _ = neuron_build(store, tmp_path)
    check(recipe, manifest.units)


@pytest.mark.parametrize(
    "leave_out",
    ["decode/2/.compilation_complete", "decode/0/graph_<key>.neff", "decode/3/graph.hlo"],
)
def test_a_phase_short_of_one_complete_entry_is_refused_with_the_count(
    tmp_path: Path, leave_out: str
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    recipe, manifest, _ = neuron_build(store, tmp_path, leave_out)
    with pytest.raises(UserError, match="decode phase has 3 complete entries for 4 graphs"):
        check(recipe, manifest.units)


def test_a_record_that_lacks_a_graph_names_it(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    recipe, manifest, _ = neuron_build(store, tmp_path)
    prefill = manifest.units[0]
    short = UnitRecord(
        prefill.key, prefill.factors, prefill.graphs[:-1], prefill.files, prefill.toolchain
    )
    with pytest.raises(UserError) as caught:
        check(recipe, (short, *manifest.units[1:]))
    message = str(caught.value)
    assert "prefill graph prefill num_batched_tokens=4096 kv_segment_size=0 missing" in message
    assert "\n" not in message and message.endswith("before serving")


def test_a_missing_phase_lists_its_graphs_and_counts_the_rest(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    recipe, manifest, _ = neuron_build(store, tmp_path)
    with pytest.raises(UserError) as caught:
        check(recipe, manifest.units[1:])  # no prefill unit: 6 graphs
    message = str(caught.value)
    assert message.count("prefill graph") == 6
    first = manifest.units[0]
    with pytest.raises(UserError, match=r"; and 4 more; compile the recipe"):
        check(recipe, (UnitRecord(first.key, first.factors, (), (), {}),))  # 10 gaps, 6 shown


def test_a_cpu_unit_without_files_does_not_cover_its_graph(tmp_path: Path) -> None:
    recipe = parse_recipe(cpu_recipe(name="cover"), "<recipe>")
    [unit] = build_plan(recipe).units
    empty = UnitRecord(unit.key.digest, dict(unit.key.factors), unit.graphs, (), {})
    with pytest.raises(UserError, match="does not cover cover: graph dynamic missing"):
        check(recipe, (empty,))


def test_serve_refuses_an_uncovered_manifest_first_in_one_line_with_exit_2(
    tmp_path: Path,
) -> None:
    """Before the node checks (the model is not on this host, the target is not a Neuron one):
    coverage is the first thing a node checks."""
    store = Store(str(tmp_path / "store"), create=True)
    _, _, digest = neuron_build(store, tmp_path, "decode/1/.compilation_complete")
    result = serve_without_vllm(
        "--manifest",
        digest,
        "--cache",
        str(tmp_path / "store"),
        "--vllm-cache-root",
        str(tmp_path / "laid-out"),
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "decode phase has 3 complete entries for 4 graphs" in lines[0]
    assert not (tmp_path / "laid-out").exists()


def test_a_manifest_without_units_is_left_to_the_manifest_checks(tmp_path: Path) -> None:
    recipe = parse_recipe(cpu_recipe(name="cover"), "<recipe>")
    check(recipe, ())  # refused by check_manifest_plans as malformed, not as uncovered


def test_an_edited_recipe_is_named_as_edited_before_any_coverage_gap(tmp_path: Path) -> None:
    """A recipe changed since its build plans other graphs, so its coverage has gaps; serve says
    what the user did (the recipe differs from the manifest, and how to serve that build)."""
    import yaml

    store = Store(str(tmp_path / "store"), create=True)
    recipe, _, digest = neuron_build(store, tmp_path)
    store.set_ref(recipe.name, "latest", digest)
    data = neuron_recipe(name="cover")
    data["max_num_seqs"] = 2 * data.get("max_num_seqs", 8)
    path = tmp_path / "cover.yaml"
    path.write_text(yaml.safe_dump(data))
    result = serve_without_vllm(str(path), "--cache", str(tmp_path / "store"))
    assert result.returncode == 2, result.stderr
    assert "does not match manifest" in result.stderr and "max_num_seqs" in result.stderr
    assert "does not cover" not in result.stderr
