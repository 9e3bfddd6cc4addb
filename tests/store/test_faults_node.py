"""Issue 19, a node's disk: a full, over-limit or read-only folder is named with its role (layout
root, local tier, destination store), never blamed on the store being read; a full one exits 3, a
read-only one 2 (the node's setting, issue 20); a read-only local tier that holds a verified
manifest pulls and serves without a write."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import StoreError, UserError, exit_code, message_lines
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
from tests.conftest import published_with_model
from tests.lib.commands import neuronbuild as nb
from tests.lib.faults import (
    can_mount,
    in_mounts,
    read_only_bind,
    small_tmpfs,
    with_file_size_limit,
)

MOUNTS = can_mount()
needs_mounts = pytest.mark.skipif(not MOUNTS, reason="no private mount namespace here")


def last_line(stderr: str) -> str:
    return stderr.strip().splitlines()[-1]


def pulled(store: Store, digest: str, tier: Path) -> None:
    result = nb("pull", digest, "--cache", store.url, "--local-cache", str(tier))
    assert result.returncode == 0, result.stderr


def test_a_local_tier_refusing_a_write_is_named_not_the_store_pulled_from(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    tier = tmp_path / "tier"
    args = ("pull", digest, "--cache", store.url, "--local-cache", str(tier))
    result = with_file_size_limit(1024, *args)  # every blob is larger: EFBIG at its write
    assert result.returncode == 3, result.stderr
    line = last_line(result.stderr)
    assert line.startswith(f"error: {tier} (local tier): File too large"), line
    assert "store error" not in line and f"{store.root}/" not in line


def test_a_layout_root_refusing_a_write_is_named_not_the_local_tier(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    if not Path("/dev/shm").is_dir() or os.stat("/dev/shm").st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs another file system than the store's, so files are copied")
    root = Path("/dev/shm") / f"nb-layout-{tmp_path.name}"
    try:
        args = ("serve", "--manifest", digest, "--cache", store.url, "--vllm-cache-root", str(root))
        result = with_file_size_limit(1024, *args)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert result.returncode == 3, result.stderr
    line = last_line(result.stderr)
    assert line.startswith(f"error: {root} (layout root): File too large"), line
    assert "store error" not in line


@needs_mounts
def test_a_full_layout_root_is_named_with_its_role_and_exits_3(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    root = tmp_path / "full"
    args = ("serve", "--manifest", digest, "--cache", store.url, "--vllm-cache-root", str(root))
    result = in_mounts(small_tmpfs(root, "4k"), *args)  # one page: the second file finds none
    assert result.returncode == 3, result.stderr
    line = last_line(result.stderr)
    assert line.startswith(f"error: {root} (layout root): No space left on device"), line
    assert "store error" not in line


def test_too_little_free_space_in_a_local_tier_exits_3_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, digest = published_with_model(tmp_path)
    tier = Store(str(tmp_path / "tier"), create=True)
    real = shutil.disk_usage
    monkeypatch.setattr(
        "neuronbuild.store.transfer.shutil.disk_usage", lambda p: real(p)._replace(free=1 << 20)
    )
    with pytest.raises((StoreError, UserError)) as caught:
        TieredStore(tier, store).fill(digest)
    assert exit_code(caught.value) == 3  # the node's condition, retryable once space is freed
    [line] = message_lines(caught.value)
    assert line.startswith(f"error: {tier.url} (local tier): ") and "only 1.0 MB free" in line, line
    assert tier.missing_blobs(store.get_manifest(digest).files())  # nothing was fetched


@needs_mounts
def test_a_small_real_disk_under_a_pull_exits_3_before_fetching(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    tier = tmp_path / "small"
    args = ("pull", digest, "--cache", store.url, "--local-cache", str(tier))
    result = in_mounts(small_tmpfs(tier, "1m"), *args)  # less than the 64 MiB margin
    assert result.returncode == 3, result.stderr
    line = last_line(result.stderr)
    assert line.startswith(f"error: {tier} (local tier): "), line
    assert "free (keeping 67.1 MB spare)" in line


def read_only(tier: Path, *args: str) -> Any:
    """``neuronbuild ARGS`` with ``tier`` read-only: a read-only bind where this host allows
    it, else the folder's write bits removed (which root ignores: skipped there)."""
    if MOUNTS:
        return in_mounts(read_only_bind(tier), *args)
    if os.geteuid() == 0:
        pytest.skip("root writes through read-only permissions and cannot mount here")
    paths = [tier, *tier.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~0o222)
    try:
        return nb(*args) if args[0] != "serve" else with_file_size_limit(1 << 40, *args)
    finally:
        for path in paths:
            path.chmod(path.stat().st_mode | 0o200)


def test_a_read_only_local_tier_holding_the_manifest_pulls_and_serves_without_a_write(
    tmp_path: Path,
) -> None:
    store, digest = published_with_model(tmp_path)
    tier = tmp_path / "tier"
    pulled(store, "tiny/latest", tier)
    before = sorted(str(p) for p in tier.rglob("*"))
    again = read_only(tier, "pull", "tiny/latest", "--cache", store.url, "--local-cache", str(tier))
    assert again.returncode == 0, again.stderr
    assert "0 blobs fetched" in again.stdout
    root = tmp_path / "root"
    args = ("--ref", "tiny/latest", "--cache", store.url, "--local-cache", str(tier))
    served = read_only(tier, "serve", *args, "--vllm-cache-root", str(root))
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["manifest"] == digest
    assert sorted(str(p) for p in tier.rglob("*")) == before  # nothing written, not even tmp/


@needs_mounts
def test_a_read_only_local_tier_lacking_blobs_is_named_with_its_role(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    tier = tmp_path / "tier"
    Store(str(tier), create=True)
    args = ("pull", digest, "--cache", store.url, "--local-cache", str(tier))
    result = in_mounts(read_only_bind(tier), *args)
    assert result.returncode == 2, result.stderr  # the node's setting (issue 20), not retried
    line = last_line(result.stderr)
    assert line.startswith(f"error: local tier {tier}"), line
    assert "Read-only file system" in line and "store error" not in line


def test_a_full_local_tier_that_holds_the_manifest_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, digest = published_with_model(tmp_path)
    tier = Store(str(tmp_path / "tier"), create=True)
    TieredStore(tier, store).fill(digest)
    real = shutil.disk_usage
    monkeypatch.setattr(
        "neuronbuild.store.transfer.shutil.disk_usage", lambda p: real(p)._replace(free=0)
    )
    report = TieredStore(tier, store).fill(digest, recheck=True)
    assert report is not None and (report.copied, report.skipped) == (0, 2)
