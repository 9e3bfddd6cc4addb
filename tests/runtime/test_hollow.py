"""Issue 46 item 6: an entry whose compiled content is an empty file (vLLM can leave its AOT
artifact ``rank_0_0/model`` at 0 bytes when its save fails after compiling,
vllm-project/vllm#35061) is never published, never reused, refused by serve's coverage check and
named by ``verify``: each engine states what a complete entry holds, by content."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronbuild.cli.store import hollow_files
from neuronbuild.engines.registry import get_engine
from neuronbuild.errors import UserError
from neuronbuild.graph import CompileUnit
from neuronbuild.orchestrate.compile import ingest
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest
from tests.conftest import cpu_recipe
from tests.runtime.test_coverage import check, neuron_build

AOT = "torch_compile_cache/torch_aot_compile/abc123"


def test_each_engine_names_its_content_files_and_never_a_marker() -> None:
    cpu, neuron = get_engine("cpu"), get_engine("neuron")
    entry = "neuron/compile_cache/MODULE_1"
    files = [
        (f"{AOT}/rank_0_0/model", 0),
        (f"{AOT}/rank_0_0/inductor_cache/x.py", 0),
        (f"{entry}/graph_MODULE_1.neff", 0),
        (f"{entry}/graph.hlo", 0),
        (f"{entry}/.compilation_complete", 0),  # a marker is empty by design
        (f"{entry}/.cache_accessed", 0),
    ]
    assert cpu.hollow(files) == [f"{AOT}/rank_0_0/model"]
    assert neuron.hollow(files) == [f"{entry}/graph_MODULE_1.neff", f"{entry}/graph.hlo"]
    assert cpu.hollow([(f"{AOT}/rank_0_0/model", 1)]) == []


def cpu_unit(store: Store, tmp_path: Path, model: bytes) -> tuple[CompileUnit, list[Path]]:
    """The CPU recipe's one unit and an AOT entry written for it whose artifact holds ``model``."""
    recipe = parse_recipe(cpu_recipe(name="hollow"), "<recipe>")
    [unit] = build_plan(recipe).units
    root = tmp_path / "scratch"
    files = [Path(AOT) / "rank_0_0" / "model", Path(AOT) / "rank_0_0" / "inductor_cache" / "k.py"]
    for rel, data in zip(files, [model, b"kernel"], strict=True):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return unit, files


def test_a_unit_with_an_empty_artifact_is_never_published(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    unit, files = cpu_unit(store, tmp_path, b"")
    with pytest.raises(RuntimeError, match=r"rank_0_0/model empty .*vllm#35061.*nothing"):
        ingest(store, unit, tmp_path / "scratch", files, {}, get_engine("cpu"))
    assert store.get_unit(unit.key.digest) is None
    assert store.backend.find(store.layout.folder("blobs")) == []


def test_a_stored_record_with_an_empty_artifact_is_not_reused_and_is_replaced(
    tmp_path: Path,
) -> None:
    """A record an older neuronbuild published with the empty artifact: compile takes it for a
    miss (the engine's content rule), compiles again, and its record replaces the hollow one."""
    store = Store(str(tmp_path / "store"), create=True)
    cpu = get_engine("cpu")
    unit, files = cpu_unit(store, tmp_path, b"")
    hollow = ingest(store, unit, tmp_path / "scratch", files, {})  # no engine: as before
    key = unit.key.digest
    assert store.cached_units([key], repairing=True) == {key: hollow}
    assert store.cached_units([key], repairing=True, sound=cpu.sound) == {}
    (tmp_path / "scratch" / files[0]).write_bytes(b"the compiled artifact")
    whole = ingest(store, unit, tmp_path / "scratch", files, {}, cpu)
    assert store.get_unit(key) == whole != hollow
    # Serve's coverage check and verify name the hollow one.
    recipe = parse_recipe(cpu_recipe(name="hollow"), "<recipe>")
    with pytest.raises(UserError, match="rank_0_0/model is empty"):
        check(recipe, (hollow,))
    check(recipe, (whole,))
    manifest = Manifest(recipe.name, recipe.canonical(), (hollow,))
    [problem] = hollow_files(manifest)
    assert problem.startswith(f"{files[0]}: empty") and "compile hollow again" in problem
    assert hollow_files(Manifest(recipe.name, recipe.canonical(), (whole,))) == []


def test_serve_refuses_a_neuron_entry_with_an_empty_neff_naming_it(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    recipe, manifest, _ = neuron_build(store, tmp_path)
    units = list(manifest.units)
    first = units[1]  # decode
    neff = next(f for f in first.files if f.path.endswith(".neff"))
    empty = type(neff)(
        neff.path, "sha256:" + "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", 0
    )
    units[1] = type(first)(
        first.key, first.factors, first.graphs,
        tuple(empty if f is neff else f for f in first.files), first.toolchain,
    )  # fmt: skip
    with pytest.raises(UserError) as raised:
        check(recipe, tuple(units))
    assert "decode phase has 3 complete entries for 4 graphs" in str(raised.value)
    assert f"{neff.path} is empty" in str(raised.value)
