"""Sharded builds and the Ray executor with the real vLLM CPU build (slow: a compile each).

Three demo recipes (``max_num_seqs`` 2, 4, 8) are built once by one process, and again by three
shard processes started at once against a folder store (the S3 case runs in test_shards.py); the
sealed manifests must list the same unit keys and entries (compiled bytes are not reproducible). A local Ray cluster builds two of them to sealed manifests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from neuronbuild.demo.model import build_demo_model
from neuronbuild.store.cas import Store
from tests.conftest import RECIPES
from tests.lib import commands

pytestmark = pytest.mark.vllm

SEQS = (2, 4, 8)


def neuronbuild(
    *args: str, env: dict[str, str] | None = None, timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    return commands.neuronbuild(*args, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The demo model and three demo recipes beside it (as in the repository's layout)."""
    root = tmp_path_factory.mktemp("shards")
    build_demo_model(root / "build" / "tiny-llama")
    base = yaml.safe_load((RECIPES / "cpu-tiny-llama.yaml").read_text())
    folder = root / "recipes"
    folder.mkdir()
    paths = []
    for n in SEQS:
        path = folder / f"demo-{n}.yaml"
        path.write_text(yaml.safe_dump({**base, "name": f"demo-{n}", "max_num_seqs": n}))
        paths.append(str(path))
    return root, paths


@pytest.fixture(scope="module")
def single(demo: tuple[Path, list[str]]) -> Store:
    """The three recipes built by one process."""
    root, paths = demo
    cache = root / "single-store"
    result = neuronbuild("compile", *paths, "--cache", str(cache), "--log-dir", str(root / "logs"))
    assert result.returncode == 0, result.stderr[-3000:]
    return Store(str(cache))


def shape(store: Store, ref: str) -> tuple[list[str], list[list[str]]]:
    """A manifest's unit keys and, per unit, its entries: the folders vLLM wrote
    (``torch_compile_cache/torch_aot_compile/<vLLM's key>``). Files inside an entry are not
    compared: Inductor names its generated sources by their bytes, which differ between two
    cold compiles of the same configuration (not reproducible, measured)."""
    manifest = store.get_manifest(store.resolve(ref))
    return [u.key for u in manifest.units], [
        sorted({"/".join(f.path.split("/")[:3]) for f in u.files}) for u in manifest.units
    ]


def test_three_shards_at_once_build_each_unit_once_and_seal_like_one_process(
    demo: tuple[Path, list[str]], single: Store
) -> None:
    # On a folder store only: the same three real shard processes against the S3 server on
    # loopback run in tests/build/test_shards.py (with the vLLM stand-in, since compiled bytes do not
    # matter to the store), which keeps this module's real compiles, and CI's time, down.
    root, paths = demo
    env: dict[str, str] = {}
    cache = str(root / "shard-store")
    shutil.rmtree(cache, ignore_errors=True)
    compile_ = [sys.executable, "-m", "neuronbuild", "compile", *paths, "--cache", cache]
    procs = [
        subprocess.Popen(
            [*compile_, "--shard", f"{i}/3", "--json", "--log-dir", str(root / f"logs-{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        for i in range(3)
    ]
    compiled: list[str] = []
    for proc in procs:
        out, err = proc.communicate(timeout=1800)
        assert proc.returncode == 0, err[-3000:]
        report = json.loads(out)
        compiled += [
            u["key"] for r in report["recipes"] for u in r["units"] if u["status"] == "compiled"
        ]
    assert len(compiled) == len(set(compiled)) == len(SEQS)  # every unit once, in one shard
    sealed = neuronbuild("seal", *paths, "--cache", cache, "--shards", "3", env=env)
    assert sealed.returncode == 0, sealed.stderr
    store = Store(cache)
    for n in SEQS:
        assert shape(store, f"demo-{n}/latest") == shape(single, f"demo-{n}/latest")


def test_a_local_ray_cluster_builds_two_cpu_recipes_to_sealed_manifests(
    demo: tuple[Path, list[str]], single: Store
) -> None:
    pytest.importorskip("ray")
    root, paths = demo
    cache = root / "ray-store"
    result = neuronbuild(
        "compile",
        *paths[:2],
        "--cache",
        str(cache),
        "--executor",
        "ray",
        "-j",
        "2",
        "--json",
        env={"RAY_ADDRESS": ""},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert [r["n_units_by_status"]["compiled"] for r in report["recipes"]] == [1, 1]
    store = Store(str(cache))
    for n in SEQS[:2]:
        ref = f"demo-{n}/latest"
        assert store.get_ref(f"demo-{n}", "latest") is not None
        assert shape(store, ref) == shape(single, ref)
