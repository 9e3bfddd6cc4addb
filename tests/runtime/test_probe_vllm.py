"""``neuronbuild probe`` against the real vLLM CPU server (issue 45): CI records the answers of a
server on the demo build; a second node's server answers the same, so its probe holds and it
writes a receipt; a node serving another model under the same build (its weights allowed to
differ) fails the probe; a server that compiled at start (a graph removed from its lay-out,
compilation allowed) fails it. Starts from the demo the vLLM tier compiles once
(:mod:`tests.lib.demo_build`): marked ``vllm``."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from neuronbuild import envs
from neuronbuild.demo.model import build_demo_model
from neuronbuild.demo.server import Server, free_port
from tests.lib.commands import neuronbuild
from tests.lib.demo_build import CompiledDemo, copied_store

pytestmark = pytest.mark.vllm


def serving(store: Path, digest: str, root: Path, workdir: Path, *extra: str) -> Server:
    """``neuronbuild serve --manifest DIGEST`` on a free port, laid out in ``root``."""
    port = free_port()
    argv = [sys.executable, "-m", "neuronbuild", "serve", "--manifest", digest, "--cache"]
    argv += [str(store), "--vllm-cache-root", str(root), "--workdir", str(workdir), *extra]
    argv += ["--port", str(port), "--host", "127.0.0.1"]
    return Server(argv, port, root.parent / f"{root.name}.log")


def probe(store: Path, digest: str, server: Server, root: Path, *args: str) -> tuple[int, str]:
    done = neuronbuild(
        "probe", "--manifest", digest, "--cache", str(store), "--url", server.url(""),
        "--vllm-cache-root", str(root), *args,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def test_a_node_answering_as_ci_holds_and_one_with_another_model_fails(
    compiled_demo: CompiledDemo, tmp_path: Path
) -> None:
    store, digest = copied_store(compiled_demo, tmp_path / "store"), compiled_demo.manifest
    workdir = compiled_demo.recipe.parent
    with serving(store, digest, tmp_path / "ci", workdir) as server:
        server.wait_ready()
        code, said = probe(store, digest, server, tmp_path / "ci", "--record")
        assert code == 0, said
    with serving(store, digest, tmp_path / "node", workdir) as server:
        server.wait_ready()
        code, said = probe(store, digest, server, tmp_path / "node")
        assert code == 0, said
        assert "probe holds: 3 answers as CI's, nothing compiled" in said
    listed = json.loads(neuronbuild("ls", "--cache", str(store), "--json").stdout)
    assert listed["receipts"] == {digest: 1}

    other = tmp_path / "other"  # the demo's tree, its model trained from another seed
    build_demo_model(other / "build" / "tiny-llama", seed=1)
    (other / "recipes").mkdir()
    allowed = ("--allow-mismatch", "weights")  # what serve refuses by default
    with serving(store, digest, tmp_path / "other-root", other / "recipes", *allowed) as server:
        server.wait_ready()
        code, said = probe(store, digest, server, tmp_path / "other-root")
    assert code == 1, said
    assert "does not answer as CI's did" in said
    assert json.loads(neuronbuild("ls", "--cache", str(store), "--json").stdout)["receipts"] == {
        digest: 1
    }


def test_a_server_that_compiled_at_start_fails_the_probe(
    compiled_demo: CompiledDemo, tmp_path: Path
) -> None:
    store, digest = copied_store(compiled_demo, tmp_path / "store"), compiled_demo.manifest
    root = tmp_path / "root"
    laid = neuronbuild(
        "serve", "--manifest", digest, "--cache", str(store), "--vllm-cache-root", str(root),
        "--workdir", str(compiled_demo.recipe.parent), "--layout-only", "--json",
    )  # fmt: skip
    assert laid.returncode == 0, laid.stderr
    prepared = json.loads(laid.stdout)
    shutil.rmtree(root / "torch_compile_cache")  # the graph removed from the lay-out
    env = {**os.environ, **prepared["env"]}
    for name in [*prepared["unset"], envs.VLLM_FORCE_AOT_LOAD]:  # and compilation allowed
        env.pop(name, None)
    port = free_port()
    argv = [*prepared["argv"], "--port", str(port), "--host", "127.0.0.1"]
    server = Server(argv, port, tmp_path / "compiling.log", env=env)
    server.cwd = Path(prepared["cwd"])
    with server:
        server.wait_ready()
        code, said = probe(store, digest, server, root)
    assert code == 1, said
    assert "rewritten or removed" in said or "compiled since it started" in said
