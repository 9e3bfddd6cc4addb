"""Figures for the main job on this machine (run with .venv/bin/python bench/startup.py).

Prints: seconds from server start to the first answered request for plain vLLM on an empty cache,
``neuronbuild serve`` from prebuilt artifacts, and plain vLLM on a copy of the folder serve lays
out, started with serve's own argv and environment (the compile-free floor), the two taking turns
going first, each after a pause: the median of N each, plain / serve and serve / floor (goal: at
most 1.02x); serve's own work before it execs vLLM (``serve --layout-only``), which attributes
serve - floor; seconds for a fully cached ``neuronbuild compile``; seconds for ``neuronbuild
plan`` of a recipe with more than 10,000 graphs.
"""

from __future__ import annotations

import argparse
import json
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
SETTLE_SECONDS = 10.0
"""Pause before each timed start, so that the last server's leftovers have ended."""


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


def warm_copy_seconds(work: Path, recipe: Path, store: Path, i: int) -> float:
    """Plain vLLM on a copy of run ``i``'s lay-out (:func:`pre_exec_seconds` made it), with the
    argv and environment ``serve --dry-run --json`` gives for that copy: serve's start less
    neuronbuild's own work."""
    warm = work / f"warm-{i}"
    shutil.copytree(work / f"pre-{i}", warm, symlinks=True)
    dry = ("serve", str(recipe), "--cache", str(store), "--vllm-cache-root", str(warm))
    out = subprocess.run(
        neuronbuild(*dry, "--dry-run", "--json"),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    plan = json.loads(out)
    env = {k: v for k, v in os.environ.items() if k not in plan["unset"]} | plan["env"]
    return first_answer_seconds(plan["argv"], work / f"warm-{i}.log", Path(plan["cwd"]), env)


def pre_exec_seconds(work: Path, recipe: Path, store: Path, i: int) -> float:
    """Seconds of neuronbuild's own work before it execs vLLM: ``serve --layout-only`` into an
    empty root (start, resolve, verify, lay out; vLLM not started), as ``serve`` does on a node
    that holds the blobs. What ``serve`` costs over the floor, less the runs' noise."""
    env = {**os.environ, "VLLM_CACHE_ROOT": str(work / f"pre-{i}")}
    argv = neuronbuild("serve", str(recipe), "--cache", str(store), "--layout-only")
    start = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, env=env)
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

        plain, prebuilt, floor, own = [], [], [], []
        engine_args = load_recipe(recipe).engine_args
        vllm_args = [sys.executable, "-m", API_SERVER, *vllm_cli_args(engine_args)]
        for i in range(args.runs):
            env = {**os.environ, "VLLM_CACHE_ROOT": str(work / f"plain-{i}")}
            plain.append(
                first_answer_seconds(vllm_args, work / f"plain-{i}.log", recipe.parent, env)
            )
            own.append(pre_exec_seconds(work, recipe, store, i))
            env = {**os.environ, "VLLM_CACHE_ROOT": str(work / f"prebuilt-{i}")}
            serve = neuronbuild("serve", str(recipe), "--cache", str(store))
            # serve and the floor take turns going first, each after a pause: what a server
            # left running when stopped (a plain start's compile workers) slows the next start.
            for turn in (0, 1) if i % 2 == 0 else (1, 0):
                time.sleep(SETTLE_SECONDS)
                if turn == 0:
                    log = work / f"nb-{i}.log"
                    prebuilt.append(first_answer_seconds(serve, log, work, env))
                else:
                    floor.append(warm_copy_seconds(work, recipe, store, i))
            print(
                f"run {i + 1}: plain vLLM {plain[-1]:.1f} s, neuronbuild serve {prebuilt[-1]:.1f} "
                f"s, plain vLLM on a warm copy {floor[-1]:.1f} s; serve's own work before the "
                f"exec {own[-1]:.2f} s"
            )
        cached = timed(neuronbuild("compile", str(recipe), "--cache", str(store)))
        graphs = big_recipe(work / "big.yaml")
        plan = timed(neuronbuild("plan", str(work / "big.yaml"), "--json"))

        p, n, w, o = (statistics.median(v) for v in (plain, prebuilt, floor, own))
        print(f"start to first answer, plain vLLM, empty cache: median {p:.1f} s of {plain}")
        print(f"start to first answer, neuronbuild serve, prebuilt: median {n:.1f} s of {prebuilt}")
        print(f"start to first answer, plain vLLM, warm copy (floor): median {w:.1f} s of {floor}")
        print(f"ratio plain / neuronbuild: {p / n:.2f}x")
        print(f"ratio neuronbuild / floor: {n / w:.3f}x (goal <= 1.02x)")
        paired = [round(a / b, 3) for a, b in zip(prebuilt, floor, strict=True)]
        print(
            f"  run by run (each pair started back to back): median "
            f"{statistics.median(paired)}x of {paired}"
        )
        print(
            f"serve's own work before the exec (serve --layout-only, empty root): median {o:.2f} "
            f"s of {[round(x, 2) for x in own]} = {(w + o) / w:.3f}x the floor; the rest of "
            f"serve - floor ({n - w - o:+.1f} s) is the runs' spread"
        )
        print(f"fully cached neuronbuild compile: {cached:.2f} s")
        print(f"neuronbuild plan --json of {graphs} graphs: {plan:.2f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
