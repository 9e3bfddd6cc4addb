"""Remote stores over a real S3 API (moto's server on 127.0.0.1, as s3fs's own suite uses):
publish, compare-and-swap, concurrent builders, corruption, hostile manifests, offline nodes."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.keys import canonical_json, sha256_digest
from neuronbuild.orchestrate.verify import verify_manifest
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from tests.lib.builders import cpu_recipe, model_folder, publish_build
from tests.lib.commands import neuronbuild, serve_without_vllm
from tests.lib.faulty_proxy import FaultyProxy
from tests.lib.s3 import moto_s3, start_moto

BUCKET = "neuronbuild-test"
PUSH = [sys.executable, "-m", "neuronbuild", "push", "remote-demo/latest"]


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """A moto S3 server for the module, its environment set in this process too."""
    with moto_s3(BUCKET) as env:
        yield env


@pytest.fixture
def s3_url(s3_env: dict[str, str]) -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"


def demo_recipe(tmp_path: Path) -> dict[str, Any]:
    model = model_folder(tmp_path)  # serve checks the model is on the node
    return cpu_recipe(name="remote-demo", cpu_isa="host", model=str(model))


def serve_dry_run(
    digest: str, url: str, node: Path, root: Path
) -> subprocess.CompletedProcess[str]:
    """``serve --manifest`` through a local tier, laying out under ``root`` without vLLM."""
    serve = ["--manifest", digest, "--cache", url, "--local-cache", str(node)]
    return serve_without_vllm(*serve, "--vllm-cache-root", str(root))


@pytest.mark.slow
def test_publish_to_s3_and_read_back(s3_url: str, tmp_path: Path) -> None:
    store = Store(s3_url)
    digest = publish_build(store, demo_recipe(tmp_path), tmp_path, "a")
    assert store.get_ref("remote-demo", "latest") == digest
    manifest = store.get_manifest(digest)
    assert all(store.has_blob(f) for f in manifest.files())
    out = tmp_path / "fetched"
    store.fetch_blob(manifest.files()[0], out)
    assert out.read_bytes().startswith(b"a:0:")
    result = neuronbuild("verify", "remote-demo/latest", "--cache", s3_url, "--deep", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True


@pytest.mark.slow
def test_four_concurrent_publishers_leave_a_consistent_store(s3_url: str, tmp_path: Path) -> None:
    recipe = demo_recipe(tmp_path)
    locals_ = []
    for i in range(4):
        local = Store(str(tmp_path / f"ci-{i}"), create=True)
        publish_build(local, recipe, tmp_path, f"builder{i}")
        locals_.append(local)
    procs = [
        subprocess.Popen(
            [*PUSH, "--from", local.url, "--cache", s3_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for local in locals_
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    remote = Store(s3_url)
    units = remote.backend.find(remote.layout.folder("units"))
    assert len(units) == 1
    digest = remote.get_ref("remote-demo", "latest")
    assert digest in {local.get_ref("remote-demo", "latest") for local in locals_}
    result = neuronbuild("verify", "remote-demo/latest", "--cache", s3_url, "--deep")
    assert result.returncode == 0, result.stderr
    assert len(remote.ref_history("remote-demo", "latest")) >= 1


@pytest.mark.slow
def test_a_flipped_byte_is_caught_by_verify_and_never_served(s3_url: str, tmp_path: Path) -> None:
    store = Store(s3_url)
    digest = publish_build(store, demo_recipe(tmp_path), tmp_path, "a")
    entry = store.get_manifest(digest).files()[0]
    blob = store.layout.blob(entry.digest)
    data = bytearray(store.backend.read(blob, 1 << 20) or b"")
    data[10] ^= 0xFF
    store.backend.put(blob, bytes(data))

    result = neuronbuild("verify", digest, "--cache", s3_url, "--deep")
    assert result.returncode == 2
    assert f"s3://{blob}" in result.stderr and "corrupt" in result.stderr
    root = tmp_path / "vllm-cache"
    served = serve_dry_run(digest, s3_url, tmp_path / "node", root)
    assert served.returncode == 2
    assert "corrupt" in served.stderr
    assert not root.exists() or not [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.slow
def test_after_pull_a_node_serves_with_the_s3_server_stopped(tmp_path: Path) -> None:
    server, env = start_moto()
    url = f"s3://{BUCKET}/offline"
    try:
        neuronbuild_env = {**os.environ, **env}
        subprocess.run(
            [
                sys.executable,
                "-c",
                f"import s3fs; s3fs.S3FileSystem().makedirs({BUCKET!r}, exist_ok=True)",
            ],
            env=neuronbuild_env,
            check=True,
        )
        local_ci = Store(str(tmp_path / "ci"), create=True)
        digest = publish_build(local_ci, demo_recipe(tmp_path), tmp_path, "a")
        pushed = neuronbuild(
            "push", "remote-demo/latest", "--from", local_ci.url, "--cache", url, env=env
        )
        assert pushed.returncode == 0, pushed.stderr
        node = tmp_path / "node"
        pulled = neuronbuild(
            "pull", "remote-demo/latest", "--cache", url, "--local-cache", str(node), env=env
        )
        assert pulled.returncode == 0, pulled.stderr
    finally:
        server.stop()
    served = serve_without_vllm(
        "--ref",
        "remote-demo/latest",
        "--cache",
        url,
        "--local-cache",
        str(node),
        "--vllm-cache-root",
        str(tmp_path / "root"),
        env=env,
    )
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["manifest"] == digest
    assert (tmp_path / "root" / "torch_compile_cache/aot/k/rank_0_0/model").is_file()


HOSTILE_FILES = {
    "parent": {"path": "../../outside", "digest": sha256_digest(b"x"), "size": 1},
    "absolute": {"path": "/tmp/outside", "digest": sha256_digest(b"x"), "size": 1},
    "size": {"path": "a", "digest": sha256_digest(b"x"), "size": 1 << 60},
    "digest": {"path": "a", "digest": "md5:abc", "size": 1},
}


@pytest.mark.parametrize("kind", [*HOSTILE_FILES, "schema", "json"])
@pytest.mark.slow
def test_hostile_manifests_are_rejected_and_nothing_is_written_outside(
    s3_url: str, tmp_path: Path, kind: str
) -> None:
    store = Store(s3_url)
    factors: dict[str, Any] = {}
    raw: dict[str, Any] = {
        "schema": "neuronbuild.manifest/1" if kind != "schema" else "neuronbuild.manifest/9",
        "name": "evil",
        "recipe": demo_recipe(tmp_path),
        "units": [
            {
                "schema": "neuronbuild.unit-record/1",
                "key": sha256_digest(canonical_json(factors)),
                "factors": factors,
                "graphs": [],
                "toolchain": {},
                "files": [HOSTILE_FILES.get(kind, HOSTILE_FILES["parent"])],
            }
        ],
    }
    data = b"{not json" if kind == "json" else json.dumps(raw).encode()
    digest = sha256_digest(data)
    store.backend.put(store.layout.manifest(digest), data)
    root = tmp_path / "deep" / "root"
    result = serve_dry_run(digest, s3_url, tmp_path / "node", root)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "deep" / "outside").exists()
    assert not (tmp_path / "outside").exists()


@pytest.mark.slow
def test_injected_500s_are_retried(s3_env: dict[str, str], tmp_path: Path) -> None:
    target = int(s3_env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    local = Store(str(tmp_path / "ci"), create=True)
    publish_build(local, demo_recipe(tmp_path), tmp_path, "a")
    url = f"s3://{BUCKET}/faults-{uuid.uuid4().hex[:8]}"
    with FaultyProxy(target, fail_every=3) as proxy:
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}
        pushed = neuronbuild(*PUSH[3:], "--from", local.url, "--cache", url, env=env)
        assert pushed.returncode == 0, pushed.stderr
        assert proxy.failed > 0
        verified = neuronbuild("verify", "remote-demo/latest", "--cache", url, "--deep", env=env)
        assert verified.returncode == 0, verified.stderr


@pytest.mark.slow
def test_a_persistent_fault_exits_3_and_loses_nothing_published(
    s3_env: dict[str, str], tmp_path: Path
) -> None:
    target = int(s3_env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    url = f"s3://{BUCKET}/down-{uuid.uuid4().hex[:8]}"
    first = publish_build(Store(url), demo_recipe(tmp_path), tmp_path, "a")
    local = Store(str(tmp_path / "ci"), create=True)
    publish_build(
        local,
        cpu_recipe(name="remote-demo", cpu_isa="host", model=str(tmp_path), seed=7),
        tmp_path,
        "b",
    )
    with FaultyProxy(target) as proxy:
        proxy.down = True
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}
        pushed = neuronbuild(*PUSH[3:], "--from", local.url, "--cache", url, env=env)
        assert pushed.returncode == 3, pushed.stderr
        assert "Traceback" not in pushed.stderr
    store = Store(url)
    assert store.get_ref("remote-demo", "latest") == first
    assert not verify_manifest(store, first, deep=True).problems


def big_local_build(tmp_path: Path, files: int = 60, size: int = 200_000) -> Store:
    """A CI folder store holding one sealed build of many blobs, to push."""
    local = Store(str(tmp_path / "ci-big"), create=True)

    def many(seed: str, plan: Any, unit: Any) -> dict[Path, bytes]:
        return {
            Path(f"torch_compile_cache/aot/k/inductor/{i:03d}.so"): os.urandom(size // 2)
            + bytes([i]) * (size // 2)
            for i in range(files)
        }

    publish_build(local, demo_recipe(tmp_path), tmp_path, "big", files=many)
    return local


@pytest.mark.slow
def test_a_publisher_killed_at_random_points_never_leaves_a_dangling_manifest_or_ref(
    s3_url: str, tmp_path: Path
) -> None:
    local = big_local_build(tmp_path)
    remote = Store(s3_url)
    rng = random.Random(20261129)
    for _ in range(20):
        proc = subprocess.Popen(
            [*PUSH, "--from", local.url, "--cache", s3_url, "-j", "2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(0.3, 3.0))
        proc.kill()
        proc.wait()
        for path in remote.backend.find(remote.layout.folder("manifests")):
            digest = "sha256:" + path.rsplit("/", 1)[-1].removesuffix(".json")
            assert not verify_manifest(remote, digest).problems, digest
        ref = remote.get_ref("remote-demo", "latest")
        if ref is not None:
            assert not verify_manifest(remote, ref, deep=True).problems
    rerun = neuronbuild(*PUSH[3:], "--from", local.url, "--cache", s3_url)
    assert rerun.returncode == 0, rerun.stderr
    assert remote.get_ref("remote-demo", "latest") == local.get_ref("remote-demo", "latest")
    assert not verify_manifest(
        remote, local.get_ref("remote-demo", "latest") or "", deep=True
    ).problems


@pytest.mark.slow
def test_a_corrupt_local_tier_blob_is_fetched_again_from_the_remote(
    s3_url: str, tmp_path: Path
) -> None:
    remote = Store(s3_url)
    digest = publish_build(remote, demo_recipe(tmp_path), tmp_path, "a")
    node = Store(str(tmp_path / "node"), create=True)
    pulled = neuronbuild("pull", digest, "--cache", s3_url, "--local-cache", node.url)
    assert pulled.returncode == 0, pulled.stderr
    entry = remote.get_manifest(digest).files()[0]
    blob = Path(node.layout.blob(entry.digest))
    data = bytearray(blob.read_bytes())
    data[0] ^= 0xFF
    blob.write_bytes(bytes(data))

    root = tmp_path / "root"
    served = serve_dry_run(digest, s3_url, Path(node.root), root)
    assert served.returncode == 0, served.stderr
    assert "fetching it again" in served.stderr
    assert (root / entry.path).read_bytes().startswith(b"a:")
    assert not verify_manifest(node, digest, deep=True).problems


@pytest.mark.slow
def test_gc_aborts_abandoned_multipart_uploads_only(s3_url: str, tmp_path: Path) -> None:
    store = Store(s3_url)
    digest = publish_build(store, demo_recipe(tmp_path), tmp_path, "a")
    bucket, _, prefix = store.root.partition("/")
    key = f"{prefix}/blobs/sha256/00/{'0' * 64}"
    store.backend.fs.call_s3("create_multipart_upload", Bucket=bucket, Key=key)
    # moto reports every upload as initiated in 2010, so the grace period is not tested here.
    swept = collect_garbage(store, now=time.time() + 10 * 86400)
    assert swept.deleted["multipart uploads"] == [f"{bucket}/{key}"]
    left = store.backend.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix)
    assert not left.get("Uploads")
    assert not verify_manifest(store, digest, deep=True).problems


@pytest.mark.slow
def test_injected_timeouts_are_retried(s3_env: dict[str, str], tmp_path: Path) -> None:
    target = int(s3_env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    local = Store(str(tmp_path / "ci"), create=True)
    publish_build(local, demo_recipe(tmp_path), tmp_path, "a")
    url = f"s3://{BUCKET}/slow-{uuid.uuid4().hex[:8]}"
    with FaultyProxy(target, stall_every=4, stall_seconds=4) as proxy:
        env = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}",
            "NEURONBUILD_S3_READ_TIMEOUT": "1",
        }
        pushed = neuronbuild(*PUSH[3:], "--from", local.url, "--cache", url, env=env)
        assert pushed.returncode == 0, pushed.stderr
        assert proxy.stalled > 0
    assert not verify_manifest(Store(url), local.get_ref("remote-demo", "latest") or "").problems


@pytest.mark.slow
def test_a_missing_bucket_or_an_unreachable_endpoint_exits_3_never_reads_as_empty(
    s3_env: dict[str, str], tmp_path: Path
) -> None:
    missing = neuronbuild("ls", "--cache", "s3://neuronbuild-no-such-bucket/x")
    assert missing.returncode == 3, missing.stderr
    assert "bucket neuronbuild-no-such-bucket does not exist" in missing.stderr
    assert "0 manifests" not in missing.stdout

    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # nothing listens once the socket is closed
    unreachable = neuronbuild(
        "status",
        "--cache",
        f"s3://{BUCKET}/x",
        env={"AWS_ENDPOINT_URL": f"http://127.0.0.1:{closed}"},
    )
    assert unreachable.returncode == 3, unreachable.stderr
    assert "cannot reach bucket" in unreachable.stderr


def test_a_listing_that_came_back_before_a_writers_first_object_lists_nothing(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """s3fs answers an empty listing with the prefix's own info, a folder once another writer's
    first object under it has landed (seen as ``history/<ref>: not a file``, exit 2, with four
    concurrent pushes): the listing lists no object, and nothing is read as one."""
    import s3fs

    store = Store(s3_url, create=True)
    prefix = store.layout.history("app", "latest")
    store.backend.put(f"{prefix}/0001.json", b"{}")  # the other writer's first entry
    lsdir = s3fs.S3FileSystem._lsdir

    async def before_it_landed(self: Any, path: str, **kwargs: Any) -> list[dict[str, Any]]:
        if kwargs.get("delimiter") == "" and path.rstrip("/") == prefix:
            return []
        return await lsdir(self, path, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_lsdir", before_it_landed)
    store.backend.fs.invalidate_cache()
    assert store.backend.list_modified(prefix) == {}
    assert store.history_entries("app", "latest") == []
