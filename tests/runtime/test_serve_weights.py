"""The model's weights by content (issue 45 items 1-2): a seal records the sha256 of every weight
file the model has, and ``serve`` refuses a node whose weight files differ from them before
anything is fetched or started, in one line naming the file. Hashing is paid once per host: a
repeat trusts the host's record of each file's stat."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.node import weights
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, Manifest
from tests.conftest import cpu_recipe
from tests.lib.builders import publish_build
from tests.lib.commands import neuronbuild, serve_without_vllm

WEIGHTS = {
    "model-00001-of-00002.safetensors": b"w" * 3000,
    "model-00002-of-00002.safetensors": b"v",
}


def model(where: Path) -> Path:
    """A model folder with a config, a weight index, two weight files, and files that are no
    weights. With an index, unit keys read the index, not the weight files' sizes
    (:func:`neuronbuild.model_files.content_digest`): only the weights check sees them."""
    folder = where / "m"
    (folder / "sub").mkdir(parents=True)
    (folder / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    index = {"weight_map": {f"layer.{i}": name for i, name in enumerate(WEIGHTS)}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    for name, data in WEIGHTS.items():
        (folder / name).write_bytes(data)
    (folder / "README.md").write_text("not weights")
    (folder / "sub" / "extra.safetensors").write_bytes(b"not loaded by vLLM")
    return folder


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def test_every_weight_file_at_the_top_of_the_folder_is_digested_by_its_bytes(
    tmp_path: Path,
) -> None:
    found = weights.digest_weights(model(tmp_path))
    assert found == tuple(FileRecord(n, sha256(d), len(d)) for n, d in sorted(WEIGHTS.items()))


def test_a_repeat_hashes_nothing_until_a_file_changes_even_with_its_size_and_mtime_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = model(tmp_path)
    hashed: list[str] = []
    real = weights.hash_file
    monkeypatch.setattr(weights, "hash_file", lambda p: hashed.append(Path(p).name) or real(p))
    first = weights.digest_weights(folder)
    assert sorted(hashed) == sorted(WEIGHTS)
    hashed.clear()
    assert weights.digest_weights(folder) == first and hashed == []  # the record holds
    name = "model-00002-of-00002.safetensors"
    st = (folder / name).stat()
    (folder / name).write_bytes(b"x")  # same size
    os.utime(folder / name, ns=(st.st_atime_ns, st.st_mtime_ns))  # and mtime set back
    again = weights.digest_weights(folder)
    assert hashed == [name]  # its ctime moved
    assert dict((f.path, f.digest) for f in again)[name] == sha256(b"x")
    hashed.clear()
    weights.digest_weights(folder, fresh=True)  # serve --deep
    assert sorted(hashed) == sorted(WEIGHTS)
    hashed.clear()
    assert weights.weight_differences(again, folder) == [] and hashed == []
    assert weights.weight_differences(again, folder, fresh=True) == []  # --deep: hashed again
    assert sorted(hashed) == sorted(WEIGHTS)


def test_a_manifest_without_weights_keeps_its_bytes_and_one_with_them_reads_back(
    tmp_path: Path,
) -> None:
    plain = Manifest("a", {}, ())
    assert b"weights" not in plain.to_bytes()
    assert Manifest.from_bytes(plain.to_bytes(), "m") == plain
    recorded = Manifest("a", {}, (), weights.digest_weights(model(tmp_path)))
    assert Manifest.from_bytes(recorded.to_bytes(), "m") == recorded


def weight(path: str, digest: str = "sha256:" + "0" * 64) -> dict[str, object]:
    return {"path": path, "digest": digest, "size": 1, "executable": False}


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ([], "at least one file"),
        ({}, "at least one file"),
        ([weight("a/b.safetensors")], "a name in the model folder"),
        ([weight("a.bin")] * 2, "once"),
        ([weight("a.bin", "md5:0")], "digest"),
    ],
)
def test_a_manifest_whose_weights_are_malformed_is_refused(value: object, error: str) -> None:
    data = json.loads(Manifest("a", {}, ()).to_bytes())
    data["weights"] = value
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    with pytest.raises(StoreDataInvalid, match=error):
        Manifest.from_bytes(raw, "m")


def sealed(tmp_path: Path) -> tuple[Path, Path]:
    """A recipe beside its model folder (``./m``), its units published and sealed by ``seal``:
    (recipe, store)."""
    folder = model(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    data = cpu_recipe(cpu_isa="host", model="./m")
    recipe.write_text(json.dumps(data))
    store = tmp_path / "store"
    publish_build(Store(str(store), create=True), data, tmp_path, "a", source=str(recipe))
    done = neuronbuild("seal", str(recipe), "--cache", str(store), "--json")
    assert done.returncode == 0, done.stderr
    [entry] = json.loads(done.stdout)["sealed"]
    assert entry["weights"] == {"files": 2, "bytes": sum(map(len, WEIGHTS.values()))}
    assert folder.is_dir()
    return recipe, store


def serve(recipe: Path, store: Path, *args: str) -> tuple[int, str, dict[str, Any] | None]:
    """``serve RECIPE --dry-run ARGS``: (exit code, stderr, the ``--json`` report when 0)."""
    argv = [str(recipe), "--cache", str(store), "--dry-run", *args]
    done = serve_without_vllm(*argv, "--vllm-cache-root", str(store.parent / "root"))
    if done.returncode:
        return done.returncode, done.stderr, None
    report = serve_without_vllm(*argv, "--vllm-cache-root", str(store.parent / "root"), "--json")
    return 0, done.stderr, json.loads(report.stdout)


def test_a_node_with_the_builds_weights_serves_and_says_it_checked_them(tmp_path: Path) -> None:
    recipe, store = sealed(tmp_path)
    code, err, out = serve(recipe, store)
    assert code == 0, err
    assert out is not None and out["weights"] == 2


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ("flip", "model-00001-of-00002.safetensors is sha256:"),
        ("remove", "model-00002-of-00002.safetensors is missing here"),
    ],
)
def test_a_node_whose_weights_differ_is_refused_in_one_line_naming_the_file(
    tmp_path: Path, change: str, said: str
) -> None:
    recipe, store = sealed(tmp_path)
    folder = recipe.parent / "m"
    if change == "flip":  # content, not size
        (folder / "model-00001-of-00002.safetensors").write_bytes(b"w" * 2999 + b"!")
    else:
        (folder / "model-00002-of-00002.safetensors").unlink()
    root = tmp_path / "root"
    done = serve_without_vllm(str(recipe), "--cache", str(store), "--vllm-cache-root", str(root))
    assert done.returncode == 2 and done.stdout == ""  # vLLM was not started
    [line] = done.stderr.strip().splitlines()
    assert said in line and "pass --allow-mismatch weights" in line, line
    assert not root.exists()  # refused before anything was laid out
    code, err, out = serve(recipe, store, "--allow-mismatch", "weights")
    assert code == 0, err
    assert out is not None and out["allowed_mismatches"][0]["name"] == "weights"
    assert "WARNING: --allow-mismatch weights" in err


def test_the_record_of_another_boot_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash may lose bytes a file had when it was hashed, its stat kept: the host's record
    holds only within the boot that wrote it."""
    from neuronbuild import folders

    boot = tmp_path / "boot_id"
    monkeypatch.setattr(folders, "BOOT_ID", boot)
    folder = model(tmp_path)
    hashed: list[str] = []
    real = weights.hash_file
    monkeypatch.setattr(weights, "hash_file", lambda p: hashed.append(Path(p).name) or real(p))
    boot.write_text("boot-0\n")
    weights.digest_weights(folder)
    weights.digest_weights(folder)
    assert sorted(hashed) == sorted(WEIGHTS)  # once in this boot
    boot.write_text("boot-1\n")
    weights.digest_weights(folder)
    assert sorted(hashed) == sorted([*WEIGHTS, *WEIGHTS])  # and again in the next


def test_files_vllm_would_not_load_are_not_weights(tmp_path: Path) -> None:
    """As vLLM's default loader picks them: safetensors before bin files, and of those only the
    ones the index names; a full hub download's extra files differ from CI in nothing."""
    recipe, store = sealed(tmp_path)
    folder = recipe.parent / "m"
    (folder / "pytorch_model.bin").write_bytes(b"the same weights, pickled")
    (folder / "extra.safetensors").write_bytes(b"not in the index")
    code, err, out = serve(recipe, store)
    assert code == 0, err
    assert out is not None and out["weights"] == 2
    bins = tmp_path / "bins"  # no safetensors: the bin files, but a trainer's state
    bins.mkdir()
    for name in ("pytorch_model-00001.bin", "training_args.bin", "optimizer.bin"):
        (bins / name).write_bytes(b"x")
    assert weights.weight_names(bins) == ["pytorch_model-00001.bin"]


def test_a_file_that_changes_while_it_is_hashed_is_refused_not_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = model(tmp_path)
    name = "model-00001-of-00002.safetensors"
    real = weights.hash_file

    def while_written(path: Path) -> tuple[str, int]:
        found = real(path)
        if Path(path).name == name:
            Path(path).write_bytes(b"W" * 3000)  # a sync tool still writing it
        return found

    monkeypatch.setattr(weights, "hash_file", while_written)
    with pytest.raises(UserError, match=f"{name} changed while it was hashed"):
        weights.digest_weights(folder)
    assert not weights.checked_path(folder).exists()


def test_a_weight_file_vllm_would_load_that_the_build_lacks_is_a_difference(
    tmp_path: Path,
) -> None:
    folder = model(tmp_path)
    (folder / "model.safetensors.index.json").unlink()  # without an index vLLM loads them all
    built = weights.digest_weights(folder)
    (folder / "model-00003-of-00002.safetensors").write_bytes(b"u")
    [difference] = weights.weight_differences(built, folder)
    assert difference.line() == (
        "model-00003-of-00002.safetensors is here but not in the build (vLLM would load it)"
    )
