"""Reuse of entries across builds for the neuron engine (run with .venv/bin/python
bench/neuron_reuse.py).

The Neuron SDK cannot be installed here, so the engine runs against the test double of vLLM +
vLLM-Neuron in ``tests/neuron_double`` (installed first on the import path, as the tests do; its
"compile" of a graph sleeps ``--graph-seconds`` to stand for neuronx-cc). Prints, for a recipe with
``--buckets`` prefill buckets, the graphs compiled and seconds of a cold ``neuronbuild compile``,
then of a second build of the same recipe with one more prefill bucket (every unit key changes:
the units compile the whole configuration) with and without seeding from the previous build.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
SITE = REPO / "tests" / "neuron_double" / "site"
TOOLCHAIN = {
    "vllm": "0.24.0",
    "vllm-neuron": "0.24.0.1.1.0",
    "neuronx-cc": "2.27.5334.0",
    "nki": "0.6.0",
    "libtorch-neuronx-lite": "2.11.0.1.0.1284",
}


def recipe(path: Path, buckets: list[int]) -> Path:
    data = {
        "name": "bench",
        "target": "trn2",
        "toolchain": TOOLCHAIN,
        "model": "./model",  # a local folder with the model's config.json
        "tensor_parallel_size": 1,
        "max_model_len": 8192,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 8192,
        "enable_prefix_caching": False,
        "additional_config": {"neuron_config": {"num_batched_tokens_buckets": buckets}},
    }
    path.write_text(yaml.safe_dump(data))
    return path


def compile_once(path: Path, store: Path, env: dict[str, str]) -> tuple[int, float]:
    """(graphs the double compiled, seconds) of one ``neuronbuild compile``."""
    record = Path(env["NEURON_DOUBLE_RECORD"])
    record.unlink(missing_ok=True)
    start = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "neuronbuild",
            "compile",
            str(path),
            "--cache",
            str(store),
            "-j",
            "2",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    seconds = time.monotonic() - start
    return (len(record.read_text().splitlines()) if record.exists() else 0), seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--buckets", type=int, default=6)
    parser.add_argument("--graph-seconds", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {
            **os.environ,
            "PYTHONPATH": str(SITE),
            "NEURON_DOUBLE_RECORD": str(root / "compiled.txt"),
            "NEURON_DOUBLE_GRAPH_SECONDS": str(args.graph_seconds),
            "NEURONBUILD_NEURON_COMPILE_GIB": "0.5",
        }
        (root / "model").mkdir()
        (root / "model" / "config.json").write_text("{}")
        before = [128 * 2**i for i in range(args.buckets - 1)] + [8192]
        after = sorted({*before, 3072})
        cold = compile_once(recipe(root / "a.yaml", before), root / "store", env)
        seeded = compile_once(recipe(root / "b.yaml", after), root / "store", env)
        fresh = compile_once(recipe(root / "c.yaml", after), root / "other", env)
    decode = 4  # num_seqs 1, 2, 4, 8 at max_model_len
    print(
        f"cold build, {len(before)} prefill + {decode} decode graphs: "
        f"{cold[0]} compiled, {cold[1]:.1f} s"
    )
    print(
        "one prefill bucket added, seeded from the previous build: "
        f"{seeded[0]} compiled, {seeded[1]:.1f} s"
    )
    print(f"one prefill bucket added, no previous build: {fresh[0]} compiled, {fresh[1]:.1f} s")


if __name__ == "__main__":
    main()
