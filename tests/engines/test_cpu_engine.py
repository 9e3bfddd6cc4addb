"""The main job end to end with the real vLLM CPU build: compile, store, serve with compilation
forbidden. One compiled demo artifact is shared by the whole vLLM tier (a compile takes minutes)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from neuronbuild.demo import text
from neuronbuild.demo.plain import PlainVllm
from neuronbuild.demo.server import Server, free_port
from neuronbuild.orchestrate.verify import verify_manifest
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
from neuronbuild_runtime.serve import ServeSource, prepare
from tests.conftest import neuronbuild
from tests.lib.demo_build import CompiledDemo, copied_store, lay_out_demo

pytestmark = pytest.mark.vllm

PROMPT = text.PROMPT
AOT_LOADED = "Directly load AOT compilation"
COMPILE_CACHE = "torch_compile_cache"


@dataclass(frozen=True)
class Demo:
    root: Path
    recipe: Path
    store: Path


@pytest.fixture(scope="module")
def demo(compiled_demo: CompiledDemo, tmp_path_factory: pytest.TempPathFactory) -> Demo:
    store = copied_store(compiled_demo, tmp_path_factory.mktemp("demo") / "store")
    return Demo(compiled_demo.root, compiled_demo.recipe, store)


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def serve_and_ask(
    argv: list[str], log: Path, cwd: Path | None = None, env: dict[str, str] | None = None
) -> tuple[str, str]:
    """Start a server, ask PROMPT greedily, stop it; returns (answer, log text)."""
    port = free_port()
    argv = [*argv, "--port", str(port), "--host", "127.0.0.1"]
    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        with Server(argv, port, log, env=env) as server:
            server.wait_ready()
            answer = server.complete(PROMPT, max_tokens=text.MAX_TOKENS)
    finally:
        os.chdir(here)
    return answer, log.read_text(errors="replace")


def test_a_second_compile_compiles_nothing_and_seals_the_same_manifest(
    demo: Demo, tmp_path: Path
) -> None:
    store = Store(str(demo.store))
    before = store.get_ref("cpu-tiny-llama", "latest")
    local = tmp_path / "local-tier"
    result = neuronbuild(
        "compile",
        str(demo.recipe),
        "--cache",
        str(demo.store),
        "--local-cache",
        str(local),
        "--json",
    )
    assert result.returncode == 0, result.stderr
    [report] = json.loads(result.stdout)["recipes"]
    assert report["n_units_by_status"] == {"cached": 1, "compiled": 0, "failed": 0, "missing": 0}
    assert report["manifest"] == before
    written_through = Store(str(local))
    assert written_through.get_ref("cpu-tiny-llama", "latest") == before
    assert not verify_manifest(written_through, before or "", deep=True).problems


def test_serve_loads_the_prebuilt_artifact_compiles_nothing_and_answers_like_plain_vllm(
    demo: Demo, tmp_path: Path
) -> None:
    root = tmp_path / "vllm-cache"
    serve = [sys.executable, "-m", "neuronbuild", "serve", str(demo.recipe)]
    serve += ["--cache", str(demo.store), "--vllm-cache-root", str(root)]
    dry = neuronbuild(*serve[3:], "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert not root.exists()  # a dry run writes nothing
    prepare(
        ServeSource(recipe=str(demo.recipe)), TieredStore(Store(str(demo.store))), cache_root=root
    )
    compiled_files = files_under(root / COMPILE_CACHE)
    assert compiled_files
    # vLLM's model-class inspection, carried from the compile: no subprocess at start.
    infos = {p: p.stat().st_ino for p in (root / "modelinfos").glob("*.json")}
    assert infos

    answer, log = serve_and_ask(serve, tmp_path / "serve.log")
    assert AOT_LOADED in log
    assert "Compiling model again" not in log
    assert files_under(root / COMPILE_CACHE) == compiled_files
    # Used as laid out: a miss would have inspected the class again and replaced the file.
    assert {p: p.stat().st_ino for p in infos} == infos

    # The demo model learned its text: the answer is the paragraph's continuation, from
    # neuronbuild serve and from plain vLLM (one process, eager, nothing of neuronbuild's loaded).
    # Plain vLLM's own server is not started too: its answer is the same greedy tokens, after a
    # cold Inductor compile that costs the tier a minute.
    assert answer == text.CONTINUATION
    with PlainVllm(
        load_recipe(demo.recipe), PROMPT, text.MAX_TOKENS, tmp_path / "eager.log"
    ) as eager:
        assert eager.answer()[0] == answer


def test_serving_a_copied_store_elsewhere_still_loads_without_compiling(
    demo: Demo, tmp_path: Path
) -> None:
    store_copy = tmp_path / "copied-store"
    shutil.copytree(demo.store, store_copy)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "VLLM_CACHE_ROOT": str(tmp_path / "other-vllm-cache")}
    serve = [sys.executable, "-m", "neuronbuild", "serve", str(demo.recipe)]
    serve += ["--cache", str(store_copy)]
    answer, log = serve_and_ask(serve, tmp_path / "serve.log", cwd=elsewhere, env=env)
    assert AOT_LOADED in log
    assert answer
    assert (tmp_path / "other-vllm-cache" / COMPILE_CACHE).is_dir()


def test_serve_against_an_empty_store_fails_before_vllm_starts(demo: Demo, tmp_path: Path) -> None:
    start = time.monotonic()
    (tmp_path / "empty").mkdir()
    result = neuronbuild("serve", str(demo.recipe), "--cache", str(tmp_path / "empty"))
    assert result.returncode == 2
    assert time.monotonic() - start < 30
    assert "no ref cpu-tiny-llama/latest" in result.stderr
    assert "vllm" not in result.stdout.lower()


def test_sigterm_during_compile_ends_every_engine_process_and_publishes_nothing(
    tmp_path: Path,
) -> None:
    recipe = lay_out_demo(tmp_path)
    store = tmp_path / "store"
    command = [sys.executable, "-m", "neuronbuild", "compile", str(recipe), "--cache", str(store)]
    command += ["--log-dir", str(tmp_path / "logs")]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    parent = psutil.Process(proc.pid)
    engines: list[psutil.Process] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(engines) < 2:
        time.sleep(1)
        engines = parent.children(recursive=True)
    assert len(engines) >= 2, "vLLM's engine processes never started"
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    _gone, alive = psutil.wait_procs(engines, timeout=15)
    assert not alive, [p.cmdline()[:3] for p in alive]
    assert not (store / "refs").exists()
    assert not (store / "manifests").exists()

    rerun = neuronbuild("compile", str(recipe), "--cache", str(store), "--json")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    digest = json.loads(rerun.stdout)["recipes"][0]["manifest"]
    s = Store(str(store))
    assert s.get_ref("cpu-tiny-llama", "latest") == digest
    assert all(s.has_blob(f) for f in s.get_manifest(digest).files())


def test_a_failing_unit_exits_1_keeps_its_log_and_seals_nothing(tmp_path: Path) -> None:
    recipe = lay_out_demo(tmp_path)
    # A model folder that is there (compile checks that first, exit 2) but that vLLM cannot load.
    broken = recipe.parent / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "nosuchmodeltype"}')
    recipe.write_text(recipe.read_text().replace("../build/tiny-llama", "./broken-model"))
    store, logs = tmp_path / "store", tmp_path / "logs"
    result = neuronbuild(
        "compile", str(recipe), "--cache", str(store), "--log-dir", str(logs), "--json"
    )
    assert result.returncode == 1, result.stderr[-2000:]
    [unit] = json.loads(result.stdout)["recipes"][0]["units"]
    assert unit["status"] == "failed" and "log:" in unit["error"]
    [log] = logs.iterdir()
    assert "nosuchmodeltype" in log.read_text(errors="replace")
    assert not (store / "manifests").exists() and not (store / "refs").exists()
