"""Figures for the main job on this machine (run with .venv/bin/python bench/startup.py).

Prints: seconds from server start to the first answered request for plain vLLM on an empty cache
versus ``neuronbuild serve`` from prebuilt artifacts (median of N each, and their ratio); seconds
for a fully cached ``neuronbuild compile``; seconds for ``neuronbuild plan`` of a recipe with more
than 10,000 graphs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from neuronbuild.demo.flow import neuronbuild
from neuronbuild.demo.model import build_demo_model
from neuronbuild.demo.server import Server, free_port
from neuronbuild.engines.vllm_args import API_SERVER, vllm_cli_args
from neuronbuild.recipe import load_recipe

REPO = Path(__file__).resolve().parent.parent
PROMPT = "Hello, my name is"


def first_answer_seconds(argv: list[str], log: Path, cwd: Path, env: dict[str, str]) -> float:
    """Seconds from process start until one completion request has been answered."""
    port = free_port()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with Server([*argv, "--host", "127.0.0.1", "--port", str(port)], port, log, env) as s:
            s.wait_ready()
            s.complete(PROMPT)
            return time.monotonic() - s.started
    finally:
        os.chdir(here)


def timed(argv: list[str]) -> float:
    start = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def big_recipe(path: Path) -> int:
    """A trn2 recipe with 64 batch x 256 context decode buckets + 1 prefill: 16,385 graphs."""
    recipe = yaml.safe_load((REPO / "recipes" / "llama-3.3-70b-trn2.yaml").read_text())
    recipe.update(name="big", max_model_len=32768, max_num_seqs=64, max_num_batched_tokens=8192)
    recipe["additional_config"] = {
        "neuron_config": {
            "num_seqs_buckets": list(range(1, 65)),
            "decode_context_length_buckets": list(range(128, 32768, 128)),
        }
    }
    path.write_text(yaml.safe_dump(recipe))
    return 1 + 64 * 256


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="server starts per variant")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="neuronbuild-bench-"))
    try:
        build_demo_model(work / "build" / "tiny-llama")
        recipe = work / "recipes" / "cpu-tiny-llama.yaml"
        recipe.parent.mkdir()
        shutil.copy(REPO / "recipes" / "cpu-tiny-llama.yaml", recipe)
        store = work / "store"
        subprocess.run(neuronbuild("compile", str(recipe), "--cache", str(store)), check=True)

        plain, prebuilt = [], []
        engine_args = load_recipe(recipe).engine_args
        vllm_args = [sys.executable, "-m", API_SERVER, *vllm_cli_args(engine_args)]
        for i in range(args.runs):
            env = {**os.environ, "VLLM_CACHE_ROOT": str(work / f"plain-{i}")}
            plain.append(
                first_answer_seconds(vllm_args, work / f"plain-{i}.log", recipe.parent, env)
            )
            env = {**os.environ, "VLLM_CACHE_ROOT": str(work / f"prebuilt-{i}")}
            serve = neuronbuild("serve", str(recipe), "--cache", str(store))
            prebuilt.append(first_answer_seconds(serve, work / f"nb-{i}.log", work, env))
            print(
                f"run {i + 1}: plain vLLM {plain[-1]:.1f} s, neuronbuild serve {prebuilt[-1]:.1f} s"
            )
        cached = timed(neuronbuild("compile", str(recipe), "--cache", str(store)))
        graphs = big_recipe(work / "big.yaml")
        plan = timed(neuronbuild("plan", str(work / "big.yaml"), "--json"))

        p, n = statistics.median(plain), statistics.median(prebuilt)
        print(f"start to first answer, plain vLLM, empty cache: median {p:.1f} s of {plain}")
        print(f"start to first answer, neuronbuild serve, prebuilt: median {n:.1f} s of {prebuilt}")
        print(f"ratio plain / neuronbuild: {p / n:.2f}x")
        print(f"fully cached neuronbuild compile: {cached:.2f} s")
        print(f"neuronbuild plan --json of {graphs} graphs: {plan:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
