"""Serve never compiles, with the real vLLM CPU build: a manifest whose artifact cannot be loaded
(another configuration's artifact laid out under this configuration's key, or the artifact's
bytes replaced) makes vLLM fail at start and leaves no new compiled artifact, instead of compiling.

Each case compiles the demo for real (minutes): marked ``vllm``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from neuronbuild.demo.server import Server, free_port
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, Manifest, UnitRecord
from tests.conftest import neuronbuild
from tests.test_cpu_engine import lay_out_demo

pytestmark = pytest.mark.vllm

AOT = "torch_compile_cache/torch_aot_compile"


def compile_demo(recipe: Path, store: Path, logs: Path) -> str:
    result = neuronbuild(
        "compile", str(recipe), "--cache", str(store), "--log-dir", str(logs), "--json"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)["manifest"]  # type: ignore[no-any-return]


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` and the sha256 of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def forged(store: Store, digest: str, replacements: dict[str, bytes]) -> str:
    """The manifest ``digest`` with the bytes of some of its files replaced (their blobs stored,
    so the store itself is consistent: only vLLM can tell the artifact is wrong)."""
    manifest = store.get_manifest(digest)
    units = []
    for unit in manifest.units:
        files = []
        for entry in unit.files:
            data = replacements.get(entry.path)
            if data is not None:
                tmp = Path(store.root) / "tmp" / "forged"
                tmp.parent.mkdir(parents=True, exist_ok=True)
                tmp.write_bytes(data)
                blob, size = store.put_file(tmp)
                entry = FileRecord(entry.path, blob, size, entry.executable)
            files.append(entry)
        units.append(UnitRecord(unit.key, unit.factors, unit.graphs, tuple(files), unit.toolchain))
    # The unit records of the forged units must be in the store for the manifest to seal.
    for unit in units:
        store.backend.put(store.layout.unit(unit.key), unit.to_bytes())
    return store.put_manifest(Manifest(manifest.name, manifest.recipe, tuple(units)))


def other_configuration(tmp_path: Path, demo: Path) -> dict[str, bytes]:
    """The AOT entry files of the demo compiled as float32, by path relative to the entry."""
    recipe = demo / "recipes" / "cpu-float32.yaml"
    data = yaml.safe_load((demo / "recipes" / "cpu-tiny-llama.yaml").read_text())
    data.update(name="cpu-float32", dtype="float32")
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    store = Store(str(tmp_path / "float32-store"), create=True)
    digest = compile_demo(recipe, tmp_path / "float32-store", tmp_path / "logs32")
    out = {}
    for unit in store.get_manifest(digest).units:
        for entry in unit.files:
            rel = entry.path.split("/", 3)[3]  # below torch_aot_compile/<key>/
            target = tmp_path / "blob"
            store.fetch_blob(entry, target)
            out[rel] = target.read_bytes()
    return out


@pytest.mark.parametrize("artifact", ["another configuration", "bytes replaced"])
def test_serve_never_compiles_an_artifact_it_cannot_load(artifact: str, tmp_path: Path) -> None:
    demo = tmp_path / "demo"
    recipe = lay_out_demo(demo)
    store_path = tmp_path / "store"
    digest = compile_demo(recipe, store_path, tmp_path / "logs")
    store = Store(str(store_path))
    paths = [f.path for f in store.get_manifest(digest).files()]
    assert paths and all(p.startswith(AOT + "/") for p in paths)
    if artifact == "another configuration":
        foreign = other_configuration(tmp_path, demo)
        by_rel = {p.split("/", 3)[3]: p for p in paths}
        replacements = {by_rel[rel]: data for rel, data in foreign.items() if rel in by_rel}
        assert replacements, "the two configurations share no file name"
    else:
        model = next(p for p in paths if p.endswith("rank_0_0/model"))
        replacements = {model: b"not an artifact of anything" * 64}
    bad = forged(store, digest, replacements)

    root = tmp_path / "vllm-cache"
    port = free_port()
    serve = [sys.executable, "-m", "neuronbuild", "serve", "--manifest", bad]
    serve += ["--cache", str(store_path), "--vllm-cache-root", str(root), "--workdir"]
    serve += [str(recipe.parent), "--port", str(port), "--host", "127.0.0.1"]
    log = tmp_path / "serve.log"
    laid_out: dict[str, str] = {}
    with Server(serve, port, log) as server:
        with pytest.raises(RuntimeError, match="server exited with"):
            server.wait_ready()
        laid_out = snapshot(root)
    text = log.read_text(errors="replace")
    assert "Compiling model again" not in text, text[-3000:]
    # Nothing compiled: the compile cache holds exactly the laid-out files, the forged ones
    # byte for byte (vLLM may write other caches, e.g. model info, beside it).
    forged_files = {p: hashlib.sha256(data).hexdigest() for p, data in replacements.items()}
    assert {p: h for p, h in laid_out.items() if p in forged_files} == forged_files
    assert {p for p in laid_out if p.startswith("torch_compile_cache/")} == set(paths)
