"""The store's seams with its callers (issue 17): it never imports the terminal layer (a copy
tells the meter its caller gives), the planner never opens a store, a tiered store answers a dry
run's presence check, and read-only is a wrapper around any backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest

from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
from neuronbuild.store.transfer import copy_manifest
from neuronbuild.transports.backends import ReadOnly
from tests.conftest import REPO, cpu_recipe, publish_build
from tests.test_wing import runtime_imports

REFUSAL = "writing here needs atomic writes, which only folders, s3:// and oci:// provide"


def test_the_store_wing_imports_no_ui_at_run_time() -> None:
    offenders = {
        str(path.relative_to(REPO)): sorted(
            m for m in runtime_imports(path) if m.startswith("neuronbuild.ui")
        )
        for path in sorted((REPO / "neuronbuild" / "store").glob("*.py"))
    }
    assert not {k: v for k, v in offenders.items() if v}


def loaded_by_planning(recipe: dict[str, Any], prefix: str) -> tuple[str, list[str]]:
    """Planning ``recipe`` in a fresh process: (its engine's name, the modules named ``prefix...``
    it loaded)."""
    code = (
        "import json, sys\n"
        "from neuronbuild.plan import build_plan\n"
        "from neuronbuild.recipe import parse_recipe\n"
        f"name = build_plan(parse_recipe({recipe!r})).engine.name\n"
        f"print(json.dumps([name, sorted(m for m in sys.modules if m.startswith({prefix!r}))]))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-800:]
    name, modules = json.loads(result.stdout)
    return name, modules


def test_planning_loads_no_store_module() -> None:
    assert loaded_by_planning(cpu_recipe(), "neuronbuild.store.") == ("cpu", [])


class Meter:
    """A byte meter as a caller passes one: it records what it is told."""

    made: ClassVar[list[Meter]] = []

    def __init__(self, what: str, total: int, blobs: int) -> None:
        self.what, self.total, self.blobs = what, total, blobs
        self.moved, self.closed = 0, 0
        Meter.made.append(self)

    def advance(self, n_bytes: int) -> None:
        self.moved += n_bytes

    def close(self) -> None:
        self.closed += 1


def published(tmp_path: Path) -> tuple[Store, str]:
    store = Store(str(tmp_path / "src"), create=True)
    return store, publish_build(store, cpu_recipe(), tmp_path, "a")


def test_a_copy_tells_the_meter_its_caller_gives_every_byte_and_closes_it(
    tmp_path: Path,
) -> None:
    src, digest = published(tmp_path)
    files = src.get_manifest(digest).blobs()
    Meter.made.clear()
    dst = Store(str(tmp_path / "dst"), create=True)
    copy_manifest(src, dst, digest, progress=Meter, what="pull")
    [meter] = Meter.made
    total = sum(f.size for f in files)
    assert (meter.what, meter.total, meter.blobs) == ("pull", total, len(files))
    assert (meter.moved, meter.closed) == (total, 1)
    copy_manifest(src, dst, digest, progress=Meter, what="pull")
    assert len(Meter.made) == 1  # nothing to move: no meter


def test_a_dry_run_finds_each_blob_in_some_tier_and_counts_those_in_none(tmp_path: Path) -> None:
    remote, digest = published(tmp_path)
    empty = Store(str(tmp_path / "empty"), create=True)
    manifest = remote.get_manifest(digest)
    TieredStore(empty, remote).check_complete(manifest, digest)  # every blob in the remote
    assert empty.missing_blobs(manifest.files()) == manifest.blobs()  # it fetched nothing
    full = Store(str(tmp_path / "full"), create=True)
    copy_manifest(remote, full, digest)
    gone = manifest.files()[0]
    remote.delete_blob(gone)
    TieredStore(full, remote).check_complete(manifest, digest)  # the local tier has it
    with pytest.raises(StoreDataInvalid, match=rf"manifest {digest} is incomplete in .*1 blob"):
        TieredStore(empty, remote).check_complete(manifest, digest)
    full.delete_blob(gone)
    with pytest.raises(StoreDataInvalid, match="1 blob missing"):
        TieredStore(full).check_complete(manifest, digest)


def test_read_only_wraps_any_backend_reads_through_it_and_refuses_every_write(
    tmp_path: Path,
) -> None:
    store, digest = published(tmp_path)
    folder = store.backend
    store.backend = ReadOnly(folder)
    name = store.get_manifest(digest).name  # reads go to the folder backend
    assert store.get_ref(name, "latest") == digest
    path = store.layout.manifest(digest)
    assert store.backend.create(path, b"x") is False  # there already: nothing to write
    token = store.backend.read_versioned(path, 1 << 20)[1]
    writes = [
        lambda: store.backend.put(path, b"x"),
        lambda: store.backend.create(path + ".new", b"x"),
        lambda: store.backend.put_file(tmp_path / "src" / "nothing", path),
        lambda: store.backend.swap(path, b"x", token),
        lambda: store.backend.delete(path),
        lambda: store.check_writable(),
        lambda: store.set_ref(name, "prod", digest),
    ]
    for write in writes:
        with pytest.raises(UserError, match=REFUSAL):
            write()
    assert Path(path).exists() and not Path(path + ".new").exists()
    assert store.get_ref(name, "prod") is None
