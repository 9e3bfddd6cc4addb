"""Issue 19, a layout inside a store: ``serve`` refuses a layout root inside the root of any
folder store it touches (``--cache``, ``--local-cache``), or one holding such a store, however
the root is named (``--vllm-cache-root``, ``$VLLM_CACHE_ROOT``, a symlink), before it writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from tests.conftest import published_with_model
from tests.lib.commands import neuronbuild as nb
from tests.lib.commands import serve_without_vllm


def refused(result: subprocess.CompletedProcess[str], root: Path | str, store: str) -> None:
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(f"error: layout root {root} "), line
    assert f"the store {store}: lay out in a folder apart from every store" in line


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
def test_a_layout_root_inside_the_store_is_refused_before_anything_is_written(
    tmp_path: Path, dry_run: tuple[str, ...]
) -> None:
    store, digest = published_with_model(tmp_path)
    before = sorted(Path(store.root).rglob("*"))
    for root in (Path(store.root), Path(store.root) / "blobs", Path(store.root) / "x" / "y"):
        args = ("--manifest", digest, "--cache", store.url, *dry_run)
        refused(serve_without_vllm(*args, "--vllm-cache-root", str(root)), root, store.url)
    assert sorted(Path(store.root).rglob("*")) == before
    listed = nb("gc", "--dry-run", "--older-than", "0", "--json", "--cache", store.url)
    assert listed.returncode == 0 and '"stray' not in listed.stdout


def test_vllm_cache_root_from_the_environment_and_through_a_symlink_is_refused(
    tmp_path: Path,
) -> None:
    store, digest = published_with_model(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(Path(store.root) / "units")
    args = ("--manifest", digest, "--cache", store.url)
    via_env = serve_without_vllm(*args, env={"VLLM_CACHE_ROOT": str(link)})
    refused(via_env, link, store.url)
    via_option = serve_without_vllm(*args, "--vllm-cache-root", str(link / "in"))
    refused(via_option, Path(store.root) / "units" / "in", store.url)  # serve resolves it


def test_a_layout_root_inside_the_local_tier_or_holding_a_store_is_refused(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    tier = tmp_path / "tier"
    Store(str(tier), create=True)
    args = ("--manifest", digest, "--cache", store.url, "--local-cache", str(tier))
    inside = tier / "layout"
    refused(serve_without_vllm(*args, "--vllm-cache-root", str(inside)), inside, str(tier))
    # The reverse: a layout root holding a store would take the store's files for its own.
    refused(serve_without_vllm(*args, "--vllm-cache-root", str(tmp_path)), tmp_path, str(tier))


def test_a_layout_root_beside_the_stores_is_served(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    beside = tmp_path / "store-layout"  # a name sharing the store's prefix is not inside it
    result = serve_without_vllm(
        "--manifest", digest, "--cache", store.url, "--vllm-cache-root", str(beside)
    )
    assert result.returncode == 0, result.stderr
