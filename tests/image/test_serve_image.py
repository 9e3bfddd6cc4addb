"""Issue 23, item 3: ``serve --vllm-cache-root`` on a node image's read-only mount. The layer is
pulled from the real registry and unpacked, then bound read-only in a private mount namespace (as a
container runtime mounts an image volume): ``serve`` checks it by the image's stamp (sizes, the
fixed mtime, the manifest digest) and by content (hashed at a node's first start, then by the
node's own record; ``--deep`` re-hashes), fetches nothing and writes nothing, and refuses in one
line (exit 2) an image of another manifest, a missing or short file, or other bytes (issue 43
item 5)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from neuronbuild.image.build import build_image
from neuronbuild.node.image_stamp import checked_path
from neuronbuild.store.cas import Store
from neuronbuild.transports.oci_registry import parse_registry_url
from tests.image.test_image import pulled, unpack
from tests.lib.builders import publish_build
from tests.lib.claims import small_recipe
from tests.lib.faults import can_mount, in_mounts, read_only_bind
from tests.lib.registry import RegistryServer

pytestmark = pytest.mark.skipif(not can_mount(), reason="no private mount namespace here")

MODEL_FILE = "torch_compile_cache/aot/k/rank_0_0/model"
"""A file of the small build's manifest (tests.lib.builders.cpu_cache_files)."""


def image_of(reg: RegistryServer, store: Store, digest: str, mount: Path, repo: str) -> None:
    """Push the image of ``digest``, pull its layer back over HTTP, unpack it at ``mount``."""
    built = build_image(store, digest, parse_registry_url(f"oci+http://{reg.host}/{repo}", "--to"))
    assert built.image is not None
    unpack(pulled(reg, repo, built.image)["layer"], mount)


def mounted(reg: RegistryServer, tmp_path: Path) -> tuple[Store, str, Path]:
    """A store holding one build, and that build's image unpacked at ``tmp_path/mount``: the
    store, the manifest digest and the mount."""
    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_build(store, small_recipe(tmp_path), tmp_path, "a")
    image_of(reg, store, digest, tmp_path / "mount", "nb/claims")
    return store, digest, tmp_path / "mount"


def serve(store: Store, digest: str, mount: Path, *more: str) -> object:
    args = ("serve", "--manifest", digest, "--cache", store.url, "--vllm-cache-root", str(mount))
    return in_mounts(read_only_bind(mount), *args, *more)


def one_line(result: object, code: int = 2) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)  # type: ignore[attr-defined]
    assert "Traceback" not in result.stderr  # type: ignore[attr-defined]
    [line] = result.stderr.strip().splitlines()  # type: ignore[attr-defined]
    return str(line)


def files_under(folder: Path) -> list[tuple[str, int, int]]:
    return sorted(
        (p.relative_to(folder).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in folder.rglob("*")
    )


@pytest.mark.parametrize("how", [(), ("--dry-run",), ("--deep",)])
def test_serve_runs_from_the_images_read_only_mount_fetching_and_writing_nothing(
    reg: RegistryServer, tmp_path: Path, how: tuple[str, ...]
) -> None:
    store, digest, mount = mounted(reg, tmp_path)
    before = files_under(mount)
    tier = tmp_path / "tier"  # a local tier in front of the store: a lay-out would fill it
    result = in_mounts(
        read_only_bind(mount),
        *("serve", "--manifest", digest, "--cache", store.url, "--vllm-cache-root", str(mount)),
        *("--local-cache", str(tier), *how),
        env={"XDG_CACHE_HOME": str(tmp_path / "xdg")},
    )
    assert result.returncode == 0, result.stderr
    if how == ("--dry-run",):
        assert f"laid out under {mount} already" in result.stdout
    else:
        prepared = json.loads(result.stdout.strip().splitlines()[-1])
        assert prepared["vllm_cache_root"] == str(mount) and prepared["laid_out"]
        # vLLM writes beside its artifacts as it loads them: its root is a mirror of links.
        shadow = Path(prepared["env"]["VLLM_CACHE_ROOT"])
        assert shadow.is_relative_to(tmp_path / "xdg")
        link = shadow / MODEL_FILE
        assert link.is_symlink() and link.resolve() == (mount / MODEL_FILE).resolve()
    assert files_under(mount) == before
    assert not tier.exists() or not list((tier / "blobs").rglob("*"))  # nothing fetched


def test_an_image_of_another_manifest_is_one_line_naming_both(
    reg: RegistryServer, tmp_path: Path
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    first = publish_build(store, small_recipe(tmp_path), tmp_path, "a")
    other = publish_build(store, {**small_recipe(tmp_path), "max_model_len": 128}, tmp_path, "b")
    mount = tmp_path / "mount"
    image_of(reg, store, first, mount, "nb/first")
    line = one_line(serve(store, other, mount, "--dry-run"))
    assert f"is a node image of manifest {first!a}, not {other}" in line, line


@pytest.mark.parametrize("damage", ["missing", "short", "touched"])
def test_a_damaged_image_is_one_line_exit_2(
    reg: RegistryServer, tmp_path: Path, damage: str
) -> None:
    store, digest, mount = mounted(reg, tmp_path)
    target = mount / MODEL_FILE
    if damage == "missing":
        target.unlink()
    elif damage == "short":
        target.write_bytes(target.read_bytes()[:-1])
        os.utime(target, ns=(0, 0))
    else:
        target.write_bytes(target.read_bytes())  # same bytes, a new mtime
    line = one_line(serve(store, digest, mount, "--dry-run"))
    assert line.startswith(
        f"error: layout root {mount} (a node image of {digest[:19]}): {MODEL_FILE}"
    )
    assert {"missing": "is missing", "short": "the manifest says", "touched": "modified"}[
        damage
    ] in line, line


def forge(target: Path) -> None:
    """Other bytes in ``target``, written in place, its size and mtime as the image's stamp
    says (a forged image: the stamp is the image's own)."""
    data = bytearray(target.read_bytes())
    data[0] ^= 1
    with target.open("r+b") as f:
        f.write(bytes(data))
    os.utime(target, ns=(0, 0))


@pytest.mark.parametrize("how", [("--dry-run",), ("--dry-run", "--deep")])
def test_a_forged_image_of_the_stamps_sizes_and_times_is_refused_at_its_first_start(
    reg: RegistryServer, tmp_path: Path, how: tuple[str, ...]
) -> None:
    """Issue 43 item 5: the first start on a node hashes the image's files, deep or not."""
    store, digest, mount = mounted(reg, tmp_path)
    forge(mount / MODEL_FILE)
    line = one_line(serve(store, digest, mount, *how))
    assert f"{MODEL_FILE} does not hash to" in line and "damaged or forged" in line, line


def test_a_repeat_start_trusts_the_nodes_record_until_a_file_changes(
    reg: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a full check the node records each file's device, inode, size, mtime and ctime
    outside the mount; a start while they hold hashes nothing, and a file written since (its
    mtime set back: its ctime cannot be) is hashed again and refused."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "node-cache"))
    store, digest, mount = mounted(reg, tmp_path)
    assert serve(store, digest, mount, "--dry-run").returncode == 0  # type: ignore[attr-defined]
    record = checked_path(mount, digest)
    assert set(json.loads(record.read_text())) == {
        f.path for f in store.get_manifest(digest).files()
    }
    assert serve(store, digest, mount, "--dry-run").returncode == 0  # type: ignore[attr-defined]
    forge(mount / MODEL_FILE)
    line = one_line(serve(store, digest, mount, "--dry-run"))
    assert f"{MODEL_FILE} does not hash to" in line, line


@pytest.mark.parametrize("how", [("--dry-run",), ("--layout-only",)])
def test_a_pod_with_the_image_volume_alone_serves_it_by_digest(
    reg: RegistryServer, tmp_path: Path, how: tuple[str, ...]
) -> None:
    """Issue 46 item 5: no store at all (an air-gapped pod): the image carries its manifest,
    checked against the digest the operator names; a prefix resolves too. A manifest the image
    does not hold is still refused in one line."""
    _, digest, mount = mounted(reg, tmp_path)
    gone = tmp_path / "no-store"
    for named in (digest, digest[:19]):
        args = ("serve", "--manifest", named, "--cache", str(gone), "--vllm-cache-root", str(mount))
        env = {"XDG_CACHE_HOME": str(tmp_path / "xdg")}
        result = in_mounts(read_only_bind(mount), *args, *how, env=env)
        assert result.returncode == 0, result.stderr
        assert f"serving the manifest the node image at {mount} holds" in result.stderr
    other = "sha256:" + "0" * 64
    args = ("serve", "--manifest", other, "--cache", str(gone), "--vllm-cache-root", str(mount))
    assert "no manifest" in one_line(in_mounts(read_only_bind(mount), *args, "--dry-run"))
