"""Claims of the neuron engine's compile half about vLLM-Neuron's cache entries that one-line
breaks left standing (issue 46 item 18), each checked in-process on entries laid out as the
plugin's ``_store_local`` leaves them (no compile runs):

- completeness: an entry is complete only with its ``.compilation_complete`` marker (written
  last) and an ``.artifact_metadata_v*.json`` naming its own key, both at compile
  (:func:`~neuronbuild.engines.neuron.compile.is_complete`) and when coverage reads a manifest's
  paths (:func:`~neuronbuild.engines.neuron.coverage.complete_entries`); the marker is laid out
  last on a node (:attr:`NeuronEngine.written_last`);
- harvest: only complete entries are harvested, none is an error, and rank capture folders,
  temporary and lock files, the ``.cache_accessed`` hit mark and symlinks stay behind;
- seeded-entry settling: a seeded entry the run did not hit is dropped, a hit one and the NKI
  folders stay, and fewer complete entries than graphs is an error;
- OOM exit codes: a SIGKILL seen as 137 (from a shell) is an OOM kill like -9, and an OOM kill is
  retried with fewer workers even when the log names a compiler error.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuronbuild.engines.neuron.compile import (
    COMPLETE_MARKER,
    NeuronCompiler,
    classify_failure,
    is_complete,
)
from neuronbuild.engines.neuron.coverage import complete_entries
from neuronbuild.engines.neuron.engine import NeuronEngine
from neuronbuild.engines.neuron.nki import CARRIED, COMPILE_CACHE, NKI_DIR
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.graph import CompileUnit
from neuronbuild.node.materialize import lay_out
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest
from neuronbuild.store.tiered import TieredStore
from tests.lib.builders import neuron_recipe, stored_unit

A, B, C = "a" * 32, "b" * 32, "c" * 32
"""Entry keys (the plugin's are 32 hex digits)."""

ARTIFACTS = ("graph.hlo", "graph_{key}.neff", ".artifact_metadata_v0.json", COMPLETE_MARKER)
"""An entry's kept files, in the order ``_store_local`` writes them (the marker last)."""


def write_entry(
    cache_root: Path, key: str, *, marker: bool = True, meta_key: str | None = None
) -> Path:
    """One entry under ``cache_root``'s compile cache as the plugin leaves it: the artifacts of
    :data:`ARTIFACTS` (the marker only if ``marker``; the metadata naming ``meta_key``, by default
    the entry's own key), with the lock file beside it, a temporary file and a rank capture
    folder."""
    root = cache_root / COMPILE_CACHE
    entry = root / key
    (entry / "rank0").mkdir(parents=True)
    (entry / "rank0" / "capture.bin").write_bytes(b"capture scratch")
    (root / f".{key}.compilation_metadata.lock").write_text("")
    (entry / f"graph_{key}.neff.tmp.123").write_bytes(b"partial")
    (entry / "graph.hlo").write_text("HloModule decode\n")
    (entry / f"graph_{key}.neff").write_bytes(b"neff" * 16)
    meta = {"cache_key": meta_key or key, "io_map": {}, "output_count": 1}
    (entry / ".artifact_metadata_v0.json").write_text(json.dumps(meta))
    if marker:
        (entry / COMPLETE_MARKER).write_text("completed:1\nneff_size:64\n")
    return entry


def kept(key: str) -> list[Path]:
    """The paths (relative to the cache root) harvest keeps of a complete entry ``key``."""
    names = sorted(name.format(key=key) for name in ARTIFACTS)
    return [COMPILE_CACHE / key / name for name in names]


def compiler() -> NeuronCompiler:
    return NeuronCompiler(NeuronEngine())


def decode_unit() -> CompileUnit:
    """The decode unit of a recipe with two decode graphs (batches 4 and 8, at max_model_len)."""
    plan = build_plan(parse_recipe(neuron_recipe({"num_seqs_buckets": [4, 8]})))
    [unit] = [u for u in plan.units if u.phase == "decode"]
    assert len(unit.graphs) == 2
    return unit


def test_an_entry_is_complete_only_with_its_marker_and_metadata_naming_its_own_key(
    tmp_path: Path,
) -> None:
    assert is_complete(write_entry(tmp_path, A))
    assert not is_complete(write_entry(tmp_path, B, marker=False))
    assert not is_complete(write_entry(tmp_path, C, meta_key=A))


def test_harvest_keeps_an_entrys_artifacts_and_leaves_scratch_behind(
    tmp_path: Path, nki_intermediate_cache: Path
) -> None:
    """Rank capture folders (``rank<N>`` or ``<prefix>.rank<N>``), temporary and lock files, the
    ``.cache_accessed`` mark a hit writes (seeded entries must never carry one) and symlinks are
    not harvested."""
    entry = write_entry(tmp_path, A)
    (entry / "server.rank1").mkdir()
    (entry / "server.rank1" / "capture.bin").write_bytes(b"capture scratch")
    (entry / "graph.hlo.lock").write_text("")
    (entry / ".cache_accessed").write_text("hit")
    outside = tmp_path / "outside.txt"
    outside.write_text("not the plugin's")
    (entry / "linked.txt").symlink_to(outside)
    assert compiler().harvest(tmp_path) == kept(A)


def test_harvest_takes_only_complete_entries_and_refuses_a_run_that_left_none(
    tmp_path: Path, nki_intermediate_cache: Path
) -> None:
    write_entry(tmp_path, A)
    write_entry(tmp_path, B, marker=False)  # killed before its marker
    write_entry(tmp_path, C, meta_key=A)  # metadata of another key: refused at load
    assert compiler().harvest(tmp_path) == kept(A)
    other = tmp_path / "other"
    write_entry(other, B, marker=False)
    with pytest.raises(RuntimeError, match="wrote no complete entry"):
        compiler().harvest(other)


def test_settling_drops_the_seeded_entries_the_run_did_not_hit_and_keeps_the_nki_folders(
    tmp_path: Path,
) -> None:
    """A seeded entry with the ``.cache_accessed`` mark was loaded by the run and stays; one
    without it belongs to a graph the configuration no longer has and goes; an entry the run
    wrote stays; the NKI folders, seeded too, are no entries and stay."""
    root = tmp_path / COMPILE_CACHE
    hit = write_entry(tmp_path, A)
    (hit / ".cache_accessed").write_text("hit")
    write_entry(tmp_path, B)  # seeded, not hit
    write_entry(tmp_path, C)  # written by the run
    for shared in (NKI_DIR, CARRIED):
        (root / shared).mkdir()
        (root / shared / "kept.json").write_text("{}")
    compiler().settle_seeded(tmp_path, decode_unit(), {A, B, NKI_DIR, CARRIED})
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted([A, C, NKI_DIR, CARRIED])
    assert (root / NKI_DIR / "kept.json").is_file() and (root / CARRIED / "kept.json").is_file()


def test_settling_refuses_fewer_complete_entries_than_the_units_graphs(tmp_path: Path) -> None:
    """Every graph needs an entry, written or hit; one without its marker does not count."""
    write_entry(tmp_path, A)
    write_entry(tmp_path, B, marker=False)
    with pytest.raises(RuntimeError, match=r"1 complete entry .* for 2 graphs"):
        compiler().settle_seeded(tmp_path, decode_unit(), set())
    (tmp_path / COMPILE_CACHE / B / COMPLETE_MARKER).write_text("completed:2\n")
    compiler().settle_seeded(tmp_path, decode_unit(), set())


def test_coverage_counts_an_entry_only_with_its_marker_and_metadata() -> None:
    def paths(key: str, *left_out: str) -> list[str]:
        names = [n.format(key=key) for n in ARTIFACTS if n not in left_out]
        return [f"{COMPILE_CACHE.as_posix()}/{key}/{name}" for name in names]

    listed = paths(A) + paths(B, COMPLETE_MARKER) + paths(C, ".artifact_metadata_v0.json")
    assert complete_entries(listed) == {A}


def test_a_node_lays_out_the_neuron_completion_marker_after_every_other_file(
    tmp_path: Path,
) -> None:
    """With the engine's own markers, a lay-out that fails on a corrupt NEFF leaves no marker
    saying its entry is complete."""
    store = Store(str(tmp_path / "store"), create=True)
    entry = f"{COMPILE_CACHE.as_posix()}/{A}"
    marker = store.put_unit(stored_unit(store, tmp_path, b"done", f"{entry}/{COMPLETE_MARKER}"))
    neff = store.put_unit(stored_unit(store, tmp_path, b"neff bytes", f"{entry}/graph_{A}.neff"))
    manifest = Manifest("app", {}, (marker, neff))
    store.put_manifest(manifest)
    Path(store.layout.blob(neff.files[0].digest)).write_bytes(b"neff bytez")  # corrupt
    root = tmp_path / "node"
    with pytest.raises(StoreDataInvalid, match="corrupt"):
        lay_out(manifest, manifest.digest, TieredStore(store), root, last=NeuronEngine.written_last)
    assert not (root / entry / COMPLETE_MARKER).exists()


@pytest.mark.parametrize(
    ("code", "log"),
    [
        (137, ""),
        (1, "RuntimeError: neuronx-cc compilation failed with 137. Check compiler logs."),
        (-9, "[NCC_INLA001] Unhandled exception in prefill bucket 128\n"),
        (137, "[NCC_INLA001] Unhandled exception in prefill bucket 128\n"),
    ],
)
def test_a_sigkill_seen_as_137_or_minus_9_is_an_oom_kill_retried_with_fewer_workers(
    code: int, log: str
) -> None:
    """137 is how a shell reports SIGKILL (-9 from Popen); the kill decides even when the log
    already names a compiler error code."""
    failure = classify_failure(code, log)
    assert (failure.retry, failure.code) == ("fewer_workers", "SIGKILL")
