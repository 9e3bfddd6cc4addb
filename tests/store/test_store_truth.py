"""The store never lies about what it holds: missing roots are errors, a graph is built only with
its blobs, compile repairs a unit whose blobs are gone, serve lays out node-locally."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.graph import Graph
from neuronbuild.keys import canonical_json, sha256_digest
from neuronbuild.orchestrate.compile import cached_records
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, UnitRecord
from tests.conftest import cpu_recipe, publish_build, published_with_model, serve_without_vllm
from tests.conftest import neuronbuild as nb
from tests.lib.builders import recipe_source


def commands_reading(store: str, recipe: Path) -> list[list[str]]:
    digest = "sha256:" + "0" * 64
    return [
        ["ls", "--cache", store],
        ["status", "--cache", store],
        ["status", str(recipe), "--cache", store],
        ["verify", digest, "--cache", store],
        ["tag", digest, "a/b", "--cache", store],
        ["gc", "--cache", store],
        ["doctor", str(recipe), "--cache", store],
        ["plan", str(recipe), "--cache", store],
        ["serve", "--manifest", digest, "--cache", store, "--dry-run"],
        ["pull", digest, "--cache", store, "--local-cache", store + "-node"],
    ]


@pytest.mark.slow
def test_a_store_root_that_does_not_exist_is_an_error_for_every_command(
    tmp_path: Path, write_recipe: Any
) -> None:
    recipe = write_recipe(cpu_recipe(cpu_isa="host"))
    for args in commands_reading(str(tmp_path / "no-store"), recipe):
        result = nb(*args)
        assert result.returncode == 3, (args, result.stdout, result.stderr)
        assert "does not exist" in result.stderr, args
        assert "0 manifests" not in result.stdout and "compile its recipe" not in result.stderr
    assert not (tmp_path / "no-store").exists()


@pytest.mark.slow
def test_a_store_root_that_is_a_file_exits_2_for_every_command(
    tmp_path: Path, write_recipe: Any
) -> None:
    recipe = write_recipe(cpu_recipe(cpu_isa="host"))
    (tmp_path / "file").write_text("not a store")
    for args in commands_reading(str(tmp_path / "file"), recipe):
        result = nb(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert "is a file" in result.stderr, args


@pytest.mark.parametrize(
    ("url", "message"),
    [("", "give a folder or a URL"), ("s3:/bucket", "did you mean s3://bucket"), ("s3:b", "'//'")],
)
@pytest.mark.slow
def test_store_urls_that_name_another_place_are_refused(
    tmp_path: Path, url: str, message: str
) -> None:
    for args in (["ls"], ["verify", "a/b"], ["gc"]):
        result = subprocess.run(
            [sys.executable, "-m", "neuronbuild", *args, "--cache", url],
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr
    assert not list(tmp_path.iterdir())  # no folder named "s3:" and no store in the cwd


def test_a_bad_s3_read_timeout_is_reported_as_that_variable(tmp_path: Path) -> None:
    result = nb("ls", "--cache", "s3://bucket/x", env={"NEURONBUILD_S3_READ_TIMEOUT": "soon"})
    assert result.returncode == 2
    assert "$NEURONBUILD_S3_READ_TIMEOUT='soon'" in result.stderr
    assert "--cache" not in result.stderr


def test_a_graph_is_built_only_while_its_blobs_are_present(
    tmp_path: Path, write_recipe: Any
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    data = cpu_recipe(cpu_isa="host")
    digest = publish_build(store, data, tmp_path, "a")
    recipe = write_recipe(data)
    os.unlink(store.layout.blob(store.get_manifest(digest).files()[0].digest))

    status = json.loads(nb("status", str(recipe), "--cache", store.url, "--json").stdout)
    assert status["recipe"]["n_graphs_by_kind"] == {"dynamic": {"cached": 0, "missing": 1}}
    plan = json.loads(nb("plan", str(recipe), "--cache", store.url, "--json").stdout)
    assert [u["cached"] for u in plan["units"]] == [False]
    doctor = nb("doctor", str(recipe), "--cache", store.url)
    assert doctor.returncode == 0 and doctor.stdout.splitlines()[1].startswith("MISS")


def one_unit_build(tmp_path: Path) -> tuple[Store, Plan, UnitRecord]:
    """A store holding one build of the CPU recipe: its plan and its one unit record."""
    store = Store(str(tmp_path / "store"), create=True)
    data = cpu_recipe(cpu_isa="host")
    digest = publish_build(store, data, tmp_path, "a")
    [unit] = store.get_manifest(digest).units
    return store, build_plan(parse_recipe(data, recipe_source(tmp_path))), unit


def test_compile_repairs_a_unit_whose_blobs_are_gone(tmp_path: Path) -> None:
    store, plan, old = one_unit_build(tmp_path)
    os.unlink(store.layout.blob(old.files[0].digest))
    assert cached_records(store, plan) == {}  # so compile compiles it again

    rebuilt = tmp_path / "rebuilt"
    rebuilt.write_bytes(b"a fresh compile")
    blob, size = store.put_file(rebuilt)
    fresh = UnitRecord(old.key, old.factors, old.graphs, (FileRecord("x/y", blob, size),), {})
    assert store.put_unit(fresh) == fresh
    assert store.get_unit(old.key) == fresh
    assert set(cached_records(store, plan)) == {old.key}


def test_a_held_unit_with_its_blobs_is_adopted_not_replaced(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    factors = {"schema": "t"}
    files = []
    for content in (b"first", b"second"):
        (tmp_path / "f").write_bytes(content)
        blob, size = store.put_file(tmp_path / "f")
        files.append(FileRecord("p", blob, size))
    key = sha256_digest(canonical_json(factors))
    first = UnitRecord(key, factors, (Graph.dynamic(),), (files[0],), {})
    second = UnitRecord(key, factors, (Graph.dynamic(),), (files[1],), {})
    assert store.put_unit(first) == first
    assert store.put_unit(second) == first


@pytest.mark.parametrize(
    ("error", "code", "message"),
    [
        ('StoreError("s3://bucket: cannot upload: EndpointConnectionError")', 3,
         "store error: s3://bucket: cannot upload"),
        ('StoreDataInvalid("units/ab.json: not canonical JSON")', 2,
         "units/ab.json: not canonical JSON"),
    ],
    ids=["outage exits 3", "bad store data exits 2"],
)  # fmt: skip
def test_a_store_failure_in_the_middle_of_compile_is_not_a_failed_unit(
    error: str, code: int, message: str, tmp_path: Path
) -> None:
    """A unit whose ingest meets a failing store or bad store data is no failed unit (exit 1):
    the run stops with the store's own exit code."""
    script = f"""
import sys
from pathlib import Path
import neuronbuild.orchestrate.compile as build
from neuronbuild.errors import StoreDataInvalid, StoreError
from neuronbuild.engines.vllm_cpu.compile import CpuCompiler
from neuronbuild.engines.compiler import EngineCommand
CpuCompiler.check_install = lambda self: None
CpuCompiler.check_host = lambda self, recipe: None
CpuCompiler.installed_versions = staticmethod(lambda d: {{"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"}})
CpuCompiler.command = lambda self, recipe, unit, root, **kw: EngineCommand(["true"], {{}}, Path.cwd())
CpuCompiler.harvest = lambda self, root: []
def outage(*args, **kwargs):
    raise {error}
build.ingest = outage
from neuronbuild.cli.main import main
sys.argv = ["neuronbuild", "compile", {str(tmp_path / "r.yaml")!r}, "--cache",
            {str(tmp_path / "store")!r}, "--log-dir", {str(tmp_path / "logs")!r}]
main()
"""
    import yaml

    (tmp_path / "model").mkdir()  # compile checks the model is on this host
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(cpu_recipe(cpu_isa="host", model="./model")))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def laid_out(store: Store, env: dict[str, str], *args: str) -> dict[str, Any]:
    result = serve_without_vllm("--ref", "tiny/latest", "--cache", store.url, *args, env=env)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def node_env(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CACHE_HOME": str(tmp_path / "node-cache"), "VLLM_CACHE_ROOT": ""}  # "": unset


def test_serve_lays_out_node_locally_with_hard_links_never_inside_the_store(
    tmp_path: Path,
) -> None:
    store, digest = published_with_model(tmp_path)
    env = node_env(tmp_path)
    served = laid_out(store, env)
    root = Path(served["vllm_cache_root"])
    assert root == tmp_path / "node-cache" / "neuronbuild" / "layouts" / digest[7:23]
    for entry in store.get_manifest(digest).files():
        placed = (root / entry.path).stat()
        blob = Path(store.layout.blob(entry.digest)).stat()
        assert placed.st_ino == blob.st_ino  # the node holds each byte once
    assert not [
        p
        for p in Path(store.root).iterdir()
        if p.name
        not in {"blobs", "units", "manifests", "refs", "history", "tmp", "locks", "layouts"}
    ]
    listed = json.loads(nb("ls", "--cache", store.url, "--json").stdout)
    assert listed["n_layouts"] == 1


def test_serve_dry_run_writes_nothing(tmp_path: Path) -> None:
    store, _ = published_with_model(tmp_path)
    before = sorted(p for p in tmp_path.rglob("*"))
    result = nb(
        "serve", "--ref", "tiny/latest", "--cache", store.url, "--dry-run", env=node_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_a_node_re_verifies_cheaply_unless_deep(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    env = node_env(tmp_path)
    root = Path(laid_out(store, env)["vllm_cache_root"])
    entry = store.get_manifest(digest).files()[0]
    placed = root / entry.path
    # Replace the laid-out file by one of equal size: a new inode, so the stamp no longer holds.
    placed.unlink()
    placed.write_bytes(b"x" * entry.size)
    laid_out(store, env)
    assert placed.read_bytes() != b"x" * entry.size
    # A private copy (so the blob stays intact), then a change that keeps inode, size and mtime:
    # only --deep looks at the bytes.
    good = placed.read_bytes()
    placed.unlink()
    placed.write_bytes(good)
    laid_out(store, env)
    stat = placed.stat()
    with open(placed, "r+b") as f:
        f.write(b"y")
    os.utime(placed, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    laid_out(store, env)
    assert placed.read_bytes().startswith(b"y")
    laid_out(store, env, "--deep")
    assert placed.read_bytes() == good


def test_gc_sweeps_the_layout_record_of_a_dead_manifest(tmp_path: Path) -> None:
    store, _ = published_with_model(tmp_path)
    env = node_env(tmp_path)
    root = Path(laid_out(store, env)["vllm_cache_root"])
    store.backend.delete(store.layout.ref("tiny", "latest"))
    # And its history: a ref creation younger than an hour may still be in flight (gc spares it).
    for entry in store.backend.find(store.layout.history("tiny", "latest")):
        store.backend.delete(entry)
    report = nb("gc", "--older-than", "0", "--json", "--cache", store.url, env=env)
    assert json.loads(report.stdout)["n_deleted_by_kind"]["layouts"] == 1
    assert store.summary()["n_layouts"] == 0
    assert not root.exists()  # the folder serve chose goes with its record


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through read-only permissions")
def test_a_read_only_store_folder_serves_without_flags(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    for path in sorted(Path(store.root).rglob("*"), reverse=True):
        path.chmod(path.stat().st_mode & ~0o222)
    Path(store.root).chmod(0o555)
    try:
        served = laid_out(store, node_env(tmp_path))
    finally:
        for path in [Path(store.root), *Path(store.root).rglob("*")]:
            path.chmod(path.stat().st_mode | 0o200)
    assert served["manifest"] == digest
    assert any("not recorded" in note for note in served["notes"])


def test_a_relative_vllm_cache_root_is_where_serve_lays_out_made_absolute(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    result = serve_without_vllm(
        "--manifest", digest, "--cache", store.url, env={"VLLM_CACHE_ROOT": "here"}, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["vllm_cache_root"] == str(tmp_path / "here")
    assert all((tmp_path / "here" / f.path).is_file() for f in store.get_manifest(digest).files())


def test_compile_repairs_a_unit_record_it_cannot_read(tmp_path: Path) -> None:
    store, plan, good = one_unit_build(tmp_path)
    path = Path(store.layout.unit(good.key))
    path.write_bytes(json.dumps(good.to_json(), indent=1).encode())  # not canonical
    assert cached_records(store, plan) == {}
    assert store.put_unit(good) == good
    assert path.read_bytes() == good.to_bytes()


def test_an_unreadable_unit_record_is_compiled_again_but_bad_data_for_the_readers(
    tmp_path: Path, write_recipe: Any
) -> None:
    store, plan, old = one_unit_build(tmp_path)
    Path(store.layout.unit(old.key)).write_text("{not a record")
    assert cached_records(store, plan) == {}  # compile compiles it again, replacing the record
    recipe = write_recipe(cpu_recipe(cpu_isa="host"))
    for command in ("plan", "doctor", "status"):
        read = nb(command, str(recipe), "--cache", store.url)
        assert read.returncode == 2 and "sha256:" in read.stderr, (command, read.stderr)
