"""A corrupt blob in a shared store has a way out (issue 46 item 7): ``pull`` and ``serve`` name
it and the command that removes it; ``verify --deep --repair`` removes it, after which compile
takes its units for uncached (and rebuilds them) and ``push --from`` a store holding it whole
copies it back."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from neuronbuild.store.cas import Store
from tests.lib.builders import cpu_recipe, publish_build
from tests.lib.commands import neuronbuild_in_process as nb


def test_a_corrupt_blob_is_named_removed_by_verify_repair_and_rebuilt_or_copied_back(
    tmp_path: Path,
) -> None:
    store = Store(str(tmp_path / "shared"), create=True)
    digest = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    good = tmp_path / "good"
    shutil.copytree(store.root, good)
    [unit] = store.get_manifest(digest).units
    file = unit.files[0]
    blob = Path(store.layout.blob(file.digest))
    blob.write_bytes(bytes([blob.read_bytes()[0] ^ 0xFF]) + blob.read_bytes()[1:])
    assert store.cached_units([unit.key]) == {unit.key: unit}  # by size: compile would reuse it

    tier = tmp_path / "tier"
    code, _, err = nb("pull", "tiny/latest", "--cache", store.url, "--local-cache", str(tier))
    assert code == 2 and "is corrupt" in err
    assert f"neuronbuild verify REF --deep --repair --cache {store.url}` removes it" in err

    code, out, _ = nb("verify", "tiny/latest", "--deep", "--cache", store.url)
    assert code == 2 and "1 corrupt blob: add --repair" in out and blob.exists()
    code, out, err = nb("verify", "tiny/latest", "--repair", "--cache", store.url)
    assert code == 2 and "--repair removes the blobs --deep finds corrupt: add --deep" in err

    code, out, _ = nb("verify", "tiny/latest", "--deep", "--repair", "--cache", store.url, "--json")
    assert code == 2
    assert json.loads(out)["removed"] == json.loads(out)["corrupt"] == [file.digest]
    assert not blob.exists()
    assert store.cached_units([unit.key], repairing=True) == {}  # compile rebuilds the unit

    code, _, err = nb("push", "tiny/latest", "--from", str(good), "--cache", store.url)
    assert code == 0, err
    code, out, _ = nb("verify", "tiny/latest", "--deep", "--cache", store.url)
    assert code == 0 and out.rstrip().endswith(": ok")
