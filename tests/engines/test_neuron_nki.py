"""NKI artifacts travel with the graphs (fidelity rows B6, B7, E8, E10): compiled against the test
double, which writes NKI records and kernel binaries as the plugin does and fails a served graph
whose binary is absent as neuronx-cc does (``NCC_EVRF059``, exit 70)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from neuronbuild.engines.neuron.compile import NeuronCompiler
from neuronbuild.engines.neuron.nki import CARRIED, kernel_files, lay_out_binaries
from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.plan import build_plan
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
from neuronbuild_runtime.serve import ServeSource, prepare
from tests.engines.test_neuron_engine import (  # noqa: F401 (double: a fixture)
    compile_small,
    double,
    setenv,
    small_recipe,
)
from tests.neuron_double import SITE

PREFIX = f"neuron/compile_cache/{CARRIED}/"


def binaries(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.mark.slow
def test_a_fresh_node_gets_every_nki_binary_at_the_path_its_graphs_name(
    double: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    nki_intermediate_cache: Path,
) -> None:
    recipe = small_recipe(tmp_path, vision=False)
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_small(recipe, store, tmp_path)
    assert report.manifest is not None
    built = binaries(nki_intermediate_cache)
    assert built  # the double's graphs call NKI kernels
    paths = [f.path for f in store.get_manifest(report.manifest).files()]
    assert sorted(p.removeprefix(PREFIX) for p in paths if p.startswith(PREFIX)) == built
    records = [p for p in paths if p.startswith("neuron/compile_cache/nki/")]
    assert records and all(p.endswith(".json") for p in records)  # no lock, no temporary file

    shutil.rmtree(nki_intermediate_cache)  # a node that never compiled
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn2")
    prepared = prepare(
        ServeSource(recipe=recipe.source), TieredStore(store), cache_root=tmp_path / "serve"
    )
    assert binaries(nki_intermediate_cache) == built
    env = {**prepared.env, "NEURON_DOUBLE_DEVICE": "trn2"}
    run = subprocess.run(prepared.argv, env=env, cwd=prepared.cwd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr

    (nki_intermediate_cache / built[0]).unlink()
    run = subprocess.run(prepared.argv, env=env, cwd=prepared.cwd, capture_output=True, text=True)
    assert run.returncode != 0
    assert "NCC_EVRF059" in run.stdout and "failed with 70" in run.stderr


def entry_referencing(cache: Path, binary: Path) -> Path:
    """A complete-looking entry whose graph.hlo names ``binary``."""
    entry = cache / ("a" * 32)
    entry.mkdir(parents=True)
    (entry / "graph.hlo").write_text(f'klir_binary.binary="{binary}"\n')
    return entry


def test_harvest_refuses_a_graph_whose_kernel_binary_is_nowhere(
    tmp_path: Path, nki_intermediate_cache: Path
) -> None:
    cache = tmp_path / "neuron" / "compile_cache"
    entry = entry_referencing(cache, nki_intermediate_cache / "k" / "kernel.klir")
    with pytest.raises(RuntimeError, match=r"references NKI kernel binary .*kernel\.klir"):
        kernel_files(cache, [entry])
    carried = cache / CARRIED / "k" / "kernel.klir"  # what a seeded entry brings along
    carried.parent.mkdir(parents=True)
    carried.write_bytes(b"klir")
    assert kernel_files(cache, [entry]) == [carried]


def test_nki_records_of_kernels_no_graph_calls_are_left_out(
    tmp_path: Path, nki_intermediate_cache: Path
) -> None:
    cache = tmp_path / "neuron" / "compile_cache"
    used = nki_intermediate_cache / "k" / "kernel.klir"
    used.parent.mkdir(parents=True)
    used.write_bytes(b"klir")
    entry = entry_referencing(cache, used)
    (cache / "nki").mkdir()
    for name, binary in (("used", used), ("stale", nki_intermediate_cache / "old.klir")):
        (cache / "nki" / f"{name}.json").write_text(json.dumps({"kernel_binary": str(binary)}))
    (cache / "nki" / "used.lock").write_text("")
    (cache / "nki" / "used.json.tmp.7").write_text("{}")
    assert kernel_files(cache, [entry]) == [
        cache / "nki" / "used.json",
        cache / CARRIED / "k" / "kernel.klir",
    ]


@pytest.mark.parametrize(
    "path",
    [f"{PREFIX}../nki/x.klir", f"{PREFIX}k/../../../escape.klir"],
)
def test_lay_out_refuses_a_binary_path_that_leaves_the_intermediate_cache(
    tmp_path: Path, nki_intermediate_cache: Path, path: str
) -> None:
    root = tmp_path / "vllm-cache"
    (root / PREFIX).mkdir(parents=True)
    (root / PREFIX / "x.klir").write_bytes(b"klir")
    with pytest.raises(StoreDataInvalid, match="escapes"):
        lay_out_binaries(root, [path])
    assert not (nki_intermediate_cache.parent / "nki").exists()


def laid_out_binary(tmp_path: Path) -> Path:
    """A lay-out root holding one carried kernel binary, ``k/kernel.klir``."""
    root = tmp_path / "vllm-cache"
    (root / PREFIX / "k").mkdir(parents=True)
    (root / PREFIX / "k" / "kernel.klir").write_bytes(b"klir")
    return root


def test_lay_out_refuses_a_symlink_planted_in_the_intermediate_cache(
    tmp_path: Path, nki_intermediate_cache: Path
) -> None:
    """The folder is under /var/tmp, which every user may write."""
    root = laid_out_binary(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (nki_intermediate_cache / "k").symlink_to(outside)
    with pytest.raises(StoreDataInvalid, match="escapes"):
        lay_out_binaries(root, [f"{PREFIX}k/kernel.klir"])
    assert not list(outside.iterdir())
    # Anything else in the manifest is not this function's business.
    assert lay_out_binaries(root, ["neuron/compile_cache/abc/graph.hlo"]) == 0


def test_the_double_extracts_nothing_with_the_capture_backend_off(
    tmp_path: Path, nki_intermediate_cache: Path
) -> None:
    """Row E10: with ``NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND`` CPU compile extracts and
    compiles nothing and exits 0, so neuronbuild must strip it from compile runs (SERVE_ONLY)."""
    recipe = small_recipe(tmp_path, vision=False)
    plan = build_plan(recipe)
    command = NeuronCompiler(plan.engine).command(recipe, plan.units[0], tmp_path / "scratch")
    env = {
        **command.env,
        "PYTHONPATH": os.pathsep.join([str(SITE), os.environ.get("PYTHONPATH", "")]),
    }
    env["NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND"] = "1"
    run = subprocess.run(command.argv, env=env, cwd=command.cwd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert not list((tmp_path / "scratch").rglob("graph.hlo"))


def test_an_intermediate_cache_that_cannot_be_written_is_one_line_naming_it(
    tmp_path: Path, nki_intermediate_cache: Path
) -> None:
    root = laid_out_binary(tmp_path)
    (nki_intermediate_cache / "k").write_text("a file where a folder belongs")
    with pytest.raises(UserError, match=f"make {nki_intermediate_cache} a folder this user"):
        lay_out_binaries(root, [f"{PREFIX}k/kernel.klir"])
