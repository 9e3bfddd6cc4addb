"""The neuron engine's compile and serve halves, run for real against the test double of vLLM +
vLLM-Neuron in ``tests/neuron_double`` (installed first on the import path; see its docstring)."""

from __future__ import annotations

import importlib
import io
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from neuronbuild import start_env
from neuronbuild.errors import UserError
from neuronbuild.orchestrate import compile as build
from neuronbuild.orchestrate.compile import compile_recipe
from neuronbuild.orchestrate.report import CompileReport, UnitOutcome
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, load_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest
from neuronbuild.store.tiered import TieredStore
from neuronbuild.ui.progress import Progress
from neuronbuild_runtime.serve import ServeSource, prepare
from tests.conftest import neuron_recipe
from tests.neuron_double import SITE


def setenv(monkeypatch: pytest.MonkeyPatch, name: str, value: str | None) -> None:
    """Set (None: unset) a variable in this process and in the environment neuronbuild records
    as the one the command started with."""
    if value is None:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delitem(start_env._STARTED_WITH, name, raising=False)
    else:
        monkeypatch.setenv(name, value)
        monkeypatch.setitem(start_env._STARTED_WITH, name, value)


@pytest.fixture
def double(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The double installed for this test; returns the file it records compiled graphs in."""
    monkeypatch.syspath_prepend(str(SITE))
    importlib.invalidate_caches()
    setenv(
        monkeypatch, "PYTHONPATH", os.pathsep.join([str(SITE), os.environ.get("PYTHONPATH", "")])
    )
    record = tmp_path / "compiled.txt"
    setenv(monkeypatch, "NEURON_DOUBLE_RECORD", str(record))
    setenv(monkeypatch, "NEURON_DOUBLE_HELPERS", str(tmp_path / "helpers.txt"))
    setenv(monkeypatch, "NEURONBUILD_NEURON_COMPILE_GIB", "0.5")
    for name in ("NEURON_DOUBLE_FAIL", "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS"):
        setenv(monkeypatch, name, None)
    monkeypatch.setattr(build, "RETRY_BACKOFF_SECONDS", 0.1)
    return record


def small_recipe(
    tmp_path: Path,
    neuron_config: dict[str, Any] | None = None,
    vision: bool = True,
    encoder: str = "vision_neuron_config",
    **args: Any,
) -> Recipe:
    """A small multimodal trn2 recipe written to a file: 3 prefill, 4 decode, 2 vision graphs;
    ``encoder``: the release's name for the encoder settings."""
    config = {
        "neuron_config": {
            "num_batched_tokens_buckets": [128, 256, 1024],
            "num_seqs_buckets": [1, 4],
        },
        encoder: {"num_vision_tokens_buckets": [2048, 4096]},
    }
    config["neuron_config"].update(neuron_config or {})
    if not vision:
        del config[encoder]
    (tmp_path / "model").mkdir(exist_ok=True)
    # The compile host needs the config; a vision section makes it a vision-language model.
    hf = {"architectures": ["Qwen3VLForConditionalGeneration"], "vision_config": {}}
    (tmp_path / "model" / "config.json").write_text(json.dumps(hf if vision else {}))
    data = neuron_recipe(
        name="small",
        model="./model",
        max_model_len=1024,
        max_num_seqs=4,
        max_num_batched_tokens=1024,
        tensor_parallel_size=1,
        additional_config=config,
        **args,
    )
    data["additional_config"]["neuron_config"]["decode_context_length_buckets"] = [512]
    path = tmp_path / "small.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_recipe(path)


def compile_small(recipe: Recipe, store: Store, tmp_path: Path, **kw: Any) -> CompileReport:
    options: dict[str, Any] = {"jobs": 3, "timeout": 60.0, "log_dir": tmp_path / "logs"}
    return compile_recipe(recipe, store, stream=io.StringIO(), **{**options, **kw})


def compiled_graphs(record: Path) -> list[str]:
    """``kind dims...`` of every graph the double compiled, in order."""
    if not record.exists():
        return []
    return [line.rsplit(" ", 1)[0] for line in record.read_text().splitlines()]


def planned(recipe: Recipe) -> list[str]:
    return [" ".join([g.kind, *(str(v) for _, v in g.dims)]) for g in build_plan(recipe).graphs]


@pytest.mark.slow
def test_every_planned_graph_is_built_exactly_once_by_parallel_phase_units(
    double: Path, tmp_path: Path
) -> None:
    recipe = small_recipe(tmp_path)
    store = Store(str(tmp_path / "store"), create=True)
    start = time.monotonic()
    report = compile_small(recipe, store, tmp_path)
    assert report.failed == 0 and report.manifest is not None
    # prefill with vision (the worker extracts vision only with prefill), and decode.
    assert [u.status for u in report.units] == ["compiled"] * 2
    assert Counter(compiled_graphs(double)) == Counter(planned(recipe))
    assert len(planned(recipe)) == 3 + 4 + 2
    manifest = store.get_manifest(report.manifest)
    paths = [f.path for f in manifest.files()]
    neffs = [p for p in paths if p.endswith(".neff")]
    assert len(neffs) == len(planned(recipe))
    assert all(p.startswith("neuron/compile_cache/") for p in paths)
    # Locks, temporary files and rank capture folders stay behind.
    assert not [p for p in paths if ".lock" in p or ".tmp" in p or "/rank0/" in p]
    assert sum(p.endswith("/.compilation_complete") for p in paths) == len(neffs)
    # vLLM-Neuron does not exit after compiling: the engine helpers it leaves are ended.
    helpers = [int(pid) for pid in (tmp_path / "helpers.txt").read_text().split()]
    assert len(helpers) == 2
    for pid in helpers:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
    assert time.monotonic() - start < 60


def test_each_unit_compiles_only_its_phase_with_the_full_configuration(
    double: Path, tmp_path: Path
) -> None:
    recipe = small_recipe(tmp_path)
    compiler = build_plan(recipe).engine.compiler()
    by_phase = {u.phase: u for u in build_plan(recipe).units}
    command = compiler.command(recipe, by_phase["decode"], tmp_path / "scratch")
    env = command.env
    assert env["VLLM_NEURON_CPU_COMPILE"] == "1"
    assert env["NEURON_PLATFORM_TARGET_OVERRIDE"] == "trn2"
    assert env["VLLM_CACHE_ROOT"] == str(tmp_path / "scratch")
    assert env["VLLM_NEURON_SKIP_PREFILL_WARMUP"] == env["VLLM_NEURON_SKIP_ENCODER_WARMUP"] == "1"
    assert "VLLM_NEURON_SKIP_DECODE_WARMUP" not in env
    assert "VLLM_NEURON_CPU_MODE" not in env
    # The prefill run also extracts the vision graphs (the worker skips vision with prefill).
    prefill = compiler.command(recipe, by_phase["prefill"], tmp_path / "scratch").env
    assert prefill["VLLM_NEURON_SKIP_DECODE_WARMUP"] == "1"
    assert "VLLM_NEURON_SKIP_PREFILL_WARMUP" not in prefill
    assert "VLLM_NEURON_SKIP_ENCODER_WARMUP" not in prefill


@pytest.mark.slow
def test_a_transient_neuronx_cc_exit_70_is_retried_once(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "failed-once"
    setenv(monkeypatch, "NEURON_DOUBLE_FAIL", f"exit70-once:{state}")
    recipe = small_recipe(tmp_path)
    report = compile_small(recipe, Store(str(tmp_path / "store"), create=True), tmp_path, jobs=1)
    assert state.exists()
    assert report.failed == 0 and report.manifest is not None
    assert Counter(compiled_graphs(double)) == Counter(planned(recipe))


@pytest.mark.slow
def test_a_compiler_error_fails_its_unit_only_and_a_later_run_retries_it(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setenv(monkeypatch, "NEURON_DOUBLE_FAIL", "ncc:256")
    recipe = small_recipe(tmp_path)
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_small(recipe, store, tmp_path)
    [failed] = [u.to_json() for u in report.units if u.status == "failed"]
    assert failed["phase"] == "prefill"
    assert failed["code"] == "NCC_INLA001"
    assert failed["bucket"] == "prefill bucket 256"
    assert Path(failed["log"]).is_file() and "NCC_INLA001" in Path(failed["log"]).read_text()
    assert "prefill phase failed at prefill bucket 256" in failed["error"]
    assert failed["log"] in failed["error"]
    # The other phases are published; nothing is sealed.
    units = build_plan(recipe).units
    held = {u.phase: store.get_unit(u.key.digest) is not None for u in units}
    assert held == {"prefill": False, "decode": True}
    assert report.manifest is None and store.get_ref("small", "latest") is None
    setenv(monkeypatch, "NEURON_DOUBLE_FAIL", None)
    again = compile_small(recipe, store, tmp_path)
    assert [u.status for u in again.units] == ["compiled", "cached"]
    assert again.manifest is not None


@pytest.mark.slow
def test_compile_exits_1_and_names_the_failing_phase(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setenv(monkeypatch, "NEURON_DOUBLE_FAIL", "ncc:128")
    recipe = small_recipe(tmp_path)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuronbuild",
            "compile",
            recipe.source,
            "--cache",
            str(tmp_path / "store"),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert (
        "prefill phase failed at prefill bucket 128: neuronx-cc error NCC_INLA001" in result.stderr
    )
    assert "not sealed" in result.stderr


@pytest.mark.slow
def test_an_oom_kill_is_retried_with_fewer_workers(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One unit only: a KV producer builds prefill alone.
    producer = {"kv_connector": "NixlConnector", "kv_role": "kv_producer"}
    recipe = small_recipe(tmp_path, vision=False, kv_transfer_config=producer)
    assert [u.phase for u in build_plan(recipe).units] == ["prefill"]
    setenv(monkeypatch, "NEURON_DOUBLE_FAIL", "oom-above:1")
    setenv(monkeypatch, "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS", "4")  # 4, then 2, then 1
    report = compile_small(recipe, Store(str(tmp_path / "store"), create=True), tmp_path)
    assert report.failed == 0, report.units
    setenv(monkeypatch, "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS", "8")  # 8, 4, 2: never enough
    report = compile_small(recipe, Store(str(tmp_path / "other"), create=True), tmp_path)
    [unit] = [u.to_json() for u in report.units]
    assert (unit["status"], unit["code"]) == ("failed", "SIGKILL")


@pytest.mark.slow
def test_a_compile_that_never_ends_times_out_without_waiting_the_kill_grace(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    setenv(monkeypatch, "NEURON_DOUBLE_FAIL", "hang")
    recipe = small_recipe(tmp_path)
    start = time.monotonic()
    report = compile_small(
        recipe, Store(str(tmp_path / "store"), create=True), tmp_path, timeout=2.0
    )
    assert report.failed == 2
    assert all("timed out after 2.0 s" in u.to_json()["error"] for u in report.units)
    assert time.monotonic() - start < 15  # 2 units at once, no 10 s grace each


@pytest.mark.slow
def test_an_added_bucket_recompiles_only_its_graph(double: Path, tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    first = compile_small(small_recipe(tmp_path), store, tmp_path)
    assert first.manifest is not None
    double.unlink()
    bigger = small_recipe(tmp_path, {"num_batched_tokens_buckets": [128, 256, 512, 1024]})
    second = compile_small(bigger, store, tmp_path)
    assert second.manifest is not None
    assert compiled_graphs(double) == ["prefill 512 0"]
    entries = {
        u["graphs"][0]["kind"]: u["n_entries_by_origin"]
        for u in map(UnitOutcome.to_json, second.units)
    }
    assert entries["prefill"] == {"compiled": 1, "reused": 3 + 2}  # with the 2 vision graphs
    assert entries["decode"] == {"compiled": 0, "reused": 4}


@pytest.mark.slow
def test_serve_lays_out_exactly_the_manifest_and_vllm_neuron_loads_every_graph(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe = small_recipe(tmp_path)
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_small(recipe, store, tmp_path)
    assert report.manifest is not None
    root = tmp_path / "serve-cache"
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn2")  # this "node" is a trn2
    prepared = prepare(ServeSource(recipe=recipe.source), TieredStore(store), cache_root=root)
    manifest = store.get_manifest(report.manifest)
    laid_out = sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and ".neuronbuild" not in p.parts
    )
    assert laid_out == sorted(f.path for f in manifest.files())
    assert prepared.env["VLLM_NEURON_DISABLE_WARMUP_COMPILE"] == "1"
    assert prepared.env["NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND"] == "1"
    assert "VLLM_NEURON_CPU_COMPILE" not in prepared.env
    env = {**prepared.env, "NEURON_DOUBLE_DEVICE": "trn2"}
    run = subprocess.run(prepared.argv, env=env, cwd=prepared.cwd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"{len(planned(recipe))} graphs loaded" in run.stdout
    # One missing entry is a miss at start, never a compile.
    [neff] = [p for p in root.rglob("*.neff")][:1]
    (neff.parent / ".compilation_complete").unlink()
    run = subprocess.run(prepared.argv, env=env, cwd=prepared.cwd, capture_output=True, text=True)
    assert run.returncode != 0
    assert "local compile cache miss" in run.stderr


@pytest.mark.slow
def test_serve_refuses_a_manifest_that_lacks_a_phase(double: Path, tmp_path: Path) -> None:
    recipe = small_recipe(tmp_path)
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_small(recipe, store, tmp_path)
    assert report.manifest is not None
    full = store.get_manifest(report.manifest)
    partial = Manifest(
        full.name, full.recipe, tuple(u for u in full.units if u.factors["phase"] != "decode")
    )
    digest = store.put_manifest(partial)
    with pytest.raises(
        UserError,
        match="does not cover small: decode graph decode batch=1 context_length=512 missing",
    ):
        prepare(ServeSource(manifest=digest), TieredStore(store), cache_root=tmp_path / "c")
    assert not (tmp_path / "c").exists()


def test_compile_refuses_speculative_decoding_with_the_reason(double: Path, tmp_path: Path) -> None:
    recipe = small_recipe(
        tmp_path, speculative_config={"method": "eagle3", "num_speculative_tokens": 2, "model": "d"}
    )
    with pytest.raises(UserError, match="CPU compile mode cannot build speculative"):
        compile_small(recipe, Store(str(tmp_path / "store"), create=True), tmp_path)


@pytest.mark.slow
def test_serve_only_switches_in_the_start_environment_are_kept_from_the_compile_run(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract sections 2 and 4: warmup-compile off makes every graph a fatal miss, and
    graph capture off makes CPU compile extract nothing yet exit 0."""
    switches = (
        "VLLM_NEURON_DISABLE_WARMUP_COMPILE",
        "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND",
        "VLLM_NEURON_ASSERT_CACHE_HIT",
    )
    for name in switches:
        setenv(monkeypatch, name, "1")
    recipe = small_recipe(tmp_path, vision=False)
    command = (
        build_plan(recipe)
        .engine.compiler()
        .command(recipe, build_plan(recipe).units[0], tmp_path / "scratch")
    )
    assert not set(switches) & set(command.env)
    stream = io.StringIO()
    report = compile_recipe(
        recipe,
        Store(str(tmp_path / "store"), create=True),
        observe=lambda n: Progress(n, stream),
        jobs=2,
        timeout=60.0,
        log_dir=tmp_path / "logs",
    )
    assert report.failed == 0 and report.manifest is not None
    assert Counter(compiled_graphs(double)) == Counter(planned(recipe))
    assert all(name in stream.getvalue() for name in switches)


def test_vllm_runs_offline_at_compile_and_at_serve(double: Path, tmp_path: Path) -> None:
    """HF_HUB_OFFLINE=1 in both engine environments, as the cpu engine sets it (README)."""
    recipe = small_recipe(tmp_path, vision=False)
    plan = build_plan(recipe)
    command = plan.engine.compiler().command(recipe, plan.units[0], tmp_path / "scratch")
    assert command.env["HF_HUB_OFFLINE"] == "1"
    assert plan.engine.serve_env(str(tmp_path / "cache"), recipe.toolchain) == {
        "VLLM_CACHE_ROOT": str(tmp_path / "cache"),
        "NEURON_LIBTORCH_CACHE_ROOT": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NEURON_DISABLE_WARMUP_COMPILE": "1",
        "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND": "1",
        "NEURON_LIBTORCH_ASSERT_CACHE_HIT": "1",
    }


def test_the_shared_compilation_timeout_is_the_unit_timeout_unless_the_user_set_it(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract sections 3 and 9: TP ranks share a graph's lock, and a waiter dies with "Shared
    compilation timeout" after the 600 s default while the holder is still compiling."""
    recipe = small_recipe(tmp_path, vision=False)
    plan = build_plan(recipe)
    compiler = plan.engine.compiler()
    env = compiler.command(recipe, plan.units[0], tmp_path / "s", timeout=3600.5).env
    assert env["NEURON_LIBTORCH_COMPILATION_TIMEOUT"] == "3601"
    assert env["VLLM_NEURON_COMPILATION_TIMEOUT"] == "3601"
    setenv(monkeypatch, "NEURON_LIBTORCH_COMPILATION_TIMEOUT", "99")
    env = compiler.command(recipe, plan.units[0], tmp_path / "s", timeout=3600).env
    assert env["NEURON_LIBTORCH_COMPILATION_TIMEOUT"] == "99"
    assert env["VLLM_NEURON_COMPILATION_TIMEOUT"] == "3600"


@pytest.mark.slow
def test_a_tampered_seed_blob_is_skipped_with_a_warning_and_its_graph_compiles(
    double: Path, tmp_path: Path
) -> None:
    """seed_scratch: unreadable previous build data seeds nothing, entry by entry."""
    store = Store(str(tmp_path / "store"), create=True)
    first = compile_small(small_recipe(tmp_path), store, tmp_path)
    assert first.manifest is not None
    neff = next(f for f in store.get_manifest(first.manifest).files() if f.path.endswith(".neff"))
    blob = store.local_blob_path(neff)
    assert blob is not None
    blob.chmod(0o644)
    blob.write_bytes(b"tampered")
    double.unlink()
    bigger = small_recipe(tmp_path, {"num_batched_tokens_buckets": [128, 256, 512, 1024]})
    stream = io.StringIO()
    second = compile_recipe(
        bigger, store, stream=stream, jobs=3, timeout=60.0, log_dir=tmp_path / "logs"
    )
    assert second.failed == 0 and second.manifest is not None
    assert "not reusing" in stream.getvalue()
    assert len(compiled_graphs(double)) == 2  # prefill 512 and the tampered graph


@pytest.mark.slow
def test_seeded_entries_the_configuration_no_longer_uses_are_dropped(
    double: Path, tmp_path: Path
) -> None:
    """Contract section 3: a hit writes .cache_accessed; an unhit seeded entry is not carried."""
    store = Store(str(tmp_path / "store"), create=True)
    for buckets in ([128, 256, 1024], [128, 512, 1024]):
        report = compile_small(
            small_recipe(tmp_path, {"num_batched_tokens_buckets": buckets}), store, tmp_path
        )
        assert report.failed == 0
    last = compile_small(
        small_recipe(tmp_path, {"num_batched_tokens_buckets": [128, 1024]}), store, tmp_path
    )
    fresh_store = Store(str(tmp_path / "fresh"), create=True)
    fresh = compile_small(
        small_recipe(tmp_path, {"num_batched_tokens_buckets": [128, 1024]}), fresh_store, tmp_path
    )
    assert last.manifest is not None and fresh.manifest is not None
    got = sorted(f.path for f in store.get_manifest(last.manifest).files())
    want = sorted(f.path for f in fresh_store.get_manifest(fresh.manifest).files())
    assert got == want
    entries = {
        u["graphs"][0]["kind"]: u["n_entries_by_origin"]
        for u in map(UnitOutcome.to_json, last.units)
    }
    assert entries["prefill"] == {"compiled": 0, "reused": 2 + 2}  # with the 2 vision graphs


def test_units_at_once_are_sized_with_the_workers_that_really_run(
    double: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Contract section 6: workers apply per rank; a user-set worker count is kept, so it sizes
    the units at once; memory is the cgroup's limit when lower than the host's."""
    from neuronbuild.engines.neuron import compile as neuron_compile

    monkeypatch.setattr(neuron_compile, "host_cores", lambda: 16)
    monkeypatch.setattr(neuron_compile, "host_memory_gib", lambda: 64.0)
    recipe = small_recipe(tmp_path)
    compiler = build_plan(recipe).engine.compiler()
    assert compiler.concurrency(recipe, 3, 3)[0] == 3
    setenv(monkeypatch, "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS", "8")
    assert compiler.concurrency(recipe, 3, 3)[0] == 2
    setenv(monkeypatch, "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS", "32")
    at_once, note = compiler.concurrency(recipe, 3, 3)
    assert at_once == 1 and note is not None and "1 rank x 32 compile workers" in note
    assert "on a host with 68.7 GB;" in note and "GiB" not in note  # sizes as human.size says
    monkeypatch.undo()
    limit = tmp_path / "memory.max"
    limit.write_text(f"{2 * 2**30}\n")
    monkeypatch.setattr(neuron_compile, "CGROUP_MEMORY_LIMITS", (limit,))
    assert neuron_compile.host_memory_gib() == 2.0
    limit.write_text("max\n")
    assert neuron_compile.host_memory_gib() > 2.0
