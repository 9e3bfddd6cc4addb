"""Figures for distributed compiles (run with .venv/bin/python bench/shards.py [--seal-only]).

1. Four CPU demo recipes (``max_num_seqs`` 2, 4, 8 and ``dtype`` float32), each built into a fresh
   folder store with the real vLLM CPU build: wall time with 1 shard process, with 2 shard
   processes running at once (then ``seal``), and with 2 Ray workers (a local cluster), the median
   of ``--repeat`` runs (default 3), and the speed-ups. Takes tens of minutes on 2 cores.
2. ``seal`` of a plan of 1,000 units on S3 (moto's server on 127.0.0.1): seconds, and the number of
   blob reads (must be 0: seal lists blobs, it never reads one).
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
from typing import Any

import yaml

from neuronbuild.graph import CompileUnit
from neuronbuild.keys import UnitKey
from neuronbuild.orchestrate.compile import ingest
from neuronbuild.orchestrate.seal import seal_plans
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store

REPO = Path(__file__).resolve().parent.parent
VARIANTS: list[dict[str, Any]] = [
    {"max_num_seqs": 2},
    {"max_num_seqs": 4},
    {"max_num_seqs": 8},
    {"dtype": "float32"},
]
SEAL_UNITS = 1000


def four_recipes(root: Path) -> list[str]:
    from neuronbuild.demo.model import build_demo_model

    build_demo_model(root / "build" / "tiny-llama")
    base = yaml.safe_load((REPO / "recipes" / "cpu-tiny-llama.yaml").read_text())
    (root / "recipes").mkdir(exist_ok=True)
    paths = []
    for i, change in enumerate(VARIANTS):
        path = root / "recipes" / f"bench-{i}.yaml"
        path.write_text(yaml.safe_dump({**base, **change, "name": f"bench-{i}"}))
        paths.append(str(path))
    return paths


def neuronbuild(*args: str) -> list[str]:
    return [sys.executable, "-m", "neuronbuild", *args]


def timed(commands: list[list[str]], then: list[str] | None = None) -> float:
    """Seconds until every command (started at once), then ``then``, exited 0."""
    start = time.monotonic()
    procs = [
        subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for c in commands
    ]
    for proc in procs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"failed: {err.decode(errors='replace')[-2000:]}")
    if then is not None:
        subprocess.run(then, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def compile_figures(repeat: int) -> None:
    root = Path(tempfile.mkdtemp(prefix="neuronbuild-shard-bench-"))
    try:
        paths = four_recipes(root)
        runs: dict[str, list[float]] = {"1 process": [], "2 shards": [], "2 Ray workers": []}
        for i in range(repeat):
            store = str(root / f"one-{i}")
            runs["1 process"].append(timed([neuronbuild("compile", *paths, "--cache", store)]))
            store = str(root / f"two-{i}")
            shards = [
                neuronbuild("compile", *paths, "--cache", store, "--shard", f"{s}/2")
                for s in range(2)
            ]
            runs["2 shards"].append(timed(shards, neuronbuild("seal", *paths, "--cache", store)))
            store = str(root / f"ray-{i}")
            ray = neuronbuild("compile", *paths, "--cache", store, "--executor", "ray", "-j", "2")
            runs["2 Ray workers"].append(timed([ray]))
            done = ", ".join(f"{name} {seconds[-1]:.0f} s" for name, seconds in runs.items())
            print(f"run {i + 1} of {repeat}: {done}", flush=True)
        one = statistics.median(runs["1 process"])
        for name, seconds in runs.items():
            median = statistics.median(seconds)
            shown = ", ".join(f"{s:.0f}" for s in seconds)
            print(
                f"four CPU recipes, {name}: median {median:.0f} s ({shown}); "
                f"speed-up {one / median:.2f}x"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def seal_figure() -> None:
    from loopback_s3 import start_s3

    server = start_s3("bench")
    work = Path(tempfile.mkdtemp(prefix="neuronbuild-seal-bench-"))
    try:
        recipe = load_recipe(REPO / "recipes" / "cpu-tiny-llama.yaml")
        plan = build_plan(recipe)
        [base] = plan.units
        units = tuple(
            CompileUnit(base.graphs, UnitKey({**base.key.factors, "bench_unit": i}))
            for i in range(SEAL_UNITS)
        )
        big = Plan(recipe, plan.engine, units)
        store = Store("s3://bench/store")
        start = time.monotonic()
        for i, unit in enumerate(units):
            rel = Path(f"torch_compile_cache/torch_aot_compile/u{i:04d}/rank_0_0/model")
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(os.urandom(256))
            ingest(store, unit, work, [rel], {})
        print(f"published {SEAL_UNITS} unit records and blobs in {time.monotonic() - start:.0f} s")
        reads = 0
        fetch, check = store.fetch_blob, store.check_blob

        def counted(read: Any) -> Any:
            def wrapper(*args: Any) -> Any:
                nonlocal reads
                reads += 1
                return read(*args)

            return wrapper

        # The only two ways the store reads a blob's bytes.
        store.fetch_blob, store.check_blob = counted(fetch), counted(check)  # type: ignore[method-assign]
        report = seal_plans([big], store, tag="latest")
        assert report.sealed and not report.missing
        print(
            f"seal of a plan of {SEAL_UNITS} units on S3 (moto, loopback): {report.seconds:.1f} s, "
            f"{reads} blob reads"
        )
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seal-only", action="store_true", help="skip the compile figures")
    args = parser.parse_args()
    seal_figure()
    if not args.seal_only:
        compile_figures(args.repeat)


if __name__ == "__main__":
    main()
