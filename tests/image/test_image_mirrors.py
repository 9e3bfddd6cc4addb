"""Issue 23 (review finding 3): servers from one node image never share the mirror vLLM writes
into. Each ``serve`` gets a mirror of its own, held by a lock whose descriptor passes through the
real exec (``runtime.serve.exec_vllm``) into the program it starts; a later serve removes only the
mirrors whose server ended, and ``--layout-only``'s kept mirror survives both."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from tests.image.test_serve_image import MODEL_FILE, image_of
from tests.lib.builders import publish_build
from tests.lib.claims import small_recipe
from tests.lib.faults import can_mount, in_mounts, read_only_bind
from tests.lib.registry import RegistryServer

pytestmark = pytest.mark.skipif(not can_mount(), reason="no private mount namespace here")

STAND_IN = """
import json, os, sys
root = os.environ["VLLM_CACHE_ROOT"]
print(json.dumps({"root": root}), flush=True)
sys.stdin.readline()
print("intact" if os.path.isfile(os.path.join(root, sys.argv[1])) else "gone", flush=True)
"""
"""What serve execs instead of vLLM: it names its mirror, waits for a line, then says whether its
mirror's model file is still there."""

SERVE_EXECS_STAND_IN = f"""
import dataclasses, sys
import neuronbuild_runtime.cli as cli
from neuronbuild_runtime.serve import exec_vllm
from neuronbuild.ui.console import run
stand_in = [sys.executable, "-c", {STAND_IN!r}, {MODEL_FILE!r}]
cli.exec_vllm = lambda prepared: exec_vllm(dataclasses.replace(prepared, argv=stand_in))
sys.argv = ["serve", *sys.argv[1:]]
run(cli.serve)
"""
"""``neuronbuild serve`` as a node runs it, through the real exec, into :data:`STAND_IN`."""


def serve_args(store: Store, digest: str, mount: Path) -> list[str]:
    return ["--manifest", digest, "--cache", store.url, "--vllm-cache-root", str(mount)]


def running_server(
    store: Store, digest: str, mount: Path, env: dict[str, str]
) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", SERVE_EXECS_STAND_IN, *serve_args(store, digest, mount)]
    script = " && ".join([*read_only_bind(mount), "exec " + shlex.join(argv)])
    return subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )


def served_root(store: Store, digest: str, mount: Path, env: dict[str, str], *more: str) -> Path:
    """The mirror a serve that ends at once (as a crashed server would) hands vLLM."""
    result = in_mounts(
        read_only_bind(mount), "serve", *serve_args(store, digest, mount), *more, env=env
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout if "--json" in more else result.stdout.strip().splitlines()[-1]
    return Path(json.loads(out)["env"]["VLLM_CACHE_ROOT"])


@pytest.mark.slow
def test_a_running_servers_mirror_is_its_own_and_outlives_every_later_serve(
    reg: RegistryServer, tmp_path: Path
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_build(store, small_recipe(tmp_path), tmp_path, "a")
    mount = tmp_path / "mount"
    image_of(reg, store, digest, mount, "nb/mirrors")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    first = running_server(store, digest, mount, env)
    try:
        assert first.stdout is not None and first.stdin is not None
        held = Path(json.loads(first.stdout.readline())["root"])
        assert (held / MODEL_FILE).is_symlink()
        ended = served_root(store, digest, mount, env)
        assert ended != held and ended.parent == held.parent  # a mirror of its own
        later = served_root(store, digest, mount, env)
        assert not ended.exists(), "a mirror whose server ended is removed by the next serve"
        assert (held / MODEL_FILE).is_symlink(), "a running server's mirror was removed"
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline().strip() == "intact"
        assert first.wait(timeout=60) == 0
    finally:
        first.kill()
        first.wait()
    served_root(store, digest, mount, env)
    assert not held.exists() and not later.exists(), "ended servers' mirrors are removed"
    leftovers = sorted(p.name for p in held.parent.iterdir() if not p.name.startswith("."))
    assert len(leftovers) == 2, leftovers  # the last serve's mirror and its lock


@pytest.mark.slow
def test_the_layout_only_mirror_is_kept_reused_and_rebuilt_when_broken(
    reg: RegistryServer, tmp_path: Path
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_build(store, small_recipe(tmp_path), tmp_path, "a")
    mount = tmp_path / "mount"
    image_of(reg, store, digest, mount, "nb/mirrors")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    kept = served_root(store, digest, mount, env, "--layout-only", "--json")
    assert kept.name == "kept" and (kept / MODEL_FILE).is_symlink()
    marker = kept / "written-by-vllm"
    marker.write_text("x")
    served_root(store, digest, mount, env)  # a server's serve prunes, never the kept mirror
    assert served_root(store, digest, mount, env, "--layout-only", "--json") == kept
    assert marker.exists(), "a whole kept mirror is reused as it is"
    (kept / MODEL_FILE).unlink()
    assert served_root(store, digest, mount, env, "--layout-only", "--json") == kept
    assert (kept / MODEL_FILE).is_symlink() and not marker.exists(), "a broken one is rebuilt"
    names = sorted(p.name for p in kept.parent.iterdir() if p.name.startswith("kept"))
    assert names == ["kept"], names
