"""Sharded builds and the Ray executor with the real vLLM CPU build (slow: a compile each).

Two demo recipes (``max_num_seqs`` 2 and 4): a local Ray cluster builds both to sealed manifests
in one ``compile``, and two shard processes started at once build them against a folder store
(three shards, and the S3 case, run in test_shards.py with the vLLM stand-in). Every sealed
manifest lists the unit keys its recipe plans (``compile --dry-run``), and the shards' manifests
the same entries as the Ray build's (compiled bytes are not reproducible). No recipe is compiled
only to have a reference, and no more shards start than the 2-core CI host runs at once: each
compile here is a minute of CI.
"""

from __future__ import annotations

import json
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

SEQS = (2, 4)


def neuronbuild(
    *args: str, env: dict[str, str] | None = None, timeout: float = 1800
) -> subprocess.CompletedProcess[str]:
    return commands.neuronbuild(*args, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """The demo model and two demo recipes beside it (as in the repository's layout)."""
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
def planned(demo: tuple[Path, list[str]]) -> dict[str, list[str]]:
    """Each recipe's unit keys, as ``compile --dry-run`` plans them (recipe name -> keys)."""
    root, paths = demo
    result = neuronbuild(
        "compile", *paths, "--cache", str(root / "plan-store"), "--dry-run", "--json"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    return {r["name"]: [u["key"] for u in r["units"]] for r in report["recipes"]}


@pytest.fixture(scope="module")
def ray_built(demo: tuple[Path, list[str]]) -> Store:
    """Both recipes built by one ``compile`` on a local Ray cluster."""
    pytest.importorskip("ray")
    root, paths = demo
    cache = root / "ray-store"
    result = neuronbuild(
        "compile",
        *paths,
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


def test_a_local_ray_cluster_builds_two_cpu_recipes_to_sealed_manifests(
    ray_built: Store, planned: dict[str, list[str]]
) -> None:
    for n in SEQS:
        keys, entries = shape(ray_built, f"demo-{n}/latest")
        assert keys == planned[f"demo-{n}"]
        assert all(entries), entries  # each unit carries what vLLM compiled


def test_shards_at_once_build_each_unit_once_and_seal_like_one_build(
    demo: tuple[Path, list[str]], planned: dict[str, list[str]], ray_built: Store
) -> None:
    # On a folder store only: real shard processes against the S3 server on loopback run in
    # tests/orchestrate/test_shards.py (with the vLLM stand-in, since compiled bytes do not
    # matter to the store), which keeps this module's real compiles, and CI's time, down.
    root, paths = demo
    cache = str(root / "shard-store")
    compile_ = [sys.executable, "-m", "neuronbuild", "compile", *paths, "--cache", cache]
    shards = len(SEQS)
    procs = [
        subprocess.Popen(
            [*compile_, "--shard", f"{i}/{shards}", "--json", "--log-dir", str(root / f"logs-{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(shards)
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
    sealed = neuronbuild("seal", *paths, "--cache", cache, "--shards", str(shards))
    assert sealed.returncode == 0, sealed.stderr
    store = Store(cache)
    for n in SEQS:
        keys, entries = shape(store, f"demo-{n}/latest")
        assert keys == planned[f"demo-{n}"] and all(entries), (keys, entries)
    for n in SEQS:
        assert shape(store, f"demo-{n}/latest") == shape(ray_built, f"demo-{n}/latest")
