"""Issue 23, item 3, with the real vLLM CPU build: the demo compiled, its node image pushed to the
loopback registry, the layer pulled back and unpacked, bound read-only (as an image volume is),
and ``serve --vllm-cache-root`` on it starts vLLM, which loads the prebuilt artifact ("Directly
load AOT compilation") and answers, with nothing written into the mount (vLLM writes into its
mirror of links and copies, :mod:`neuronbuild.node.mirrors`). Starts from the
demo the vLLM tier compiles once (:mod:`tests.lib.demo_build`): marked ``vllm``."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from neuronbuild.demo.server import Server, free_port
from neuronbuild.image.build import build_image
from neuronbuild.store.cas import Store
from neuronbuild.transports.oci_registry import parse_registry_url
from tests.image.test_image import pulled, unpack
from tests.image.test_serve_image import files_under
from tests.lib.demo_build import CompiledDemo, copied_store
from tests.lib.faults import can_mount, read_only_bind
from tests.lib.registry import RegistryServer

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(not can_mount(), reason="no private mount namespace here"),
]


def test_vllm_serves_from_the_images_read_only_mount(
    compiled_demo: CompiledDemo, reg: RegistryServer, tmp_path: Path
) -> None:
    recipe, digest = compiled_demo.recipe, compiled_demo.manifest
    store_path = copied_store(compiled_demo, tmp_path / "store")
    built = build_image(
        Store(str(store_path)), digest, parse_registry_url(f"oci+http://{reg.host}/nb/demo", "--to")
    )
    assert built.image is not None
    mount = tmp_path / "mount"
    unpack(pulled(reg, "nb/demo", built.image)["layer"], mount)
    before = files_under(mount)
    port = free_port()
    serve = [sys.executable, "-m", "neuronbuild", "serve", "--manifest", digest]
    serve += ["--cache", str(store_path), "--vllm-cache-root", str(mount), "--workdir"]
    serve += [str(recipe.parent), "--port", str(port), "--host", "127.0.0.1"]
    script = " && ".join([*read_only_bind(mount), "exec " + shlex.join(serve)])
    argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", script]
    log = tmp_path / "serve.log"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")}  # vLLM's mirror of the mount
    with Server(argv, port, log, env) as server:
        server.wait_ready()
        answer = server.complete("It is a truth universally acknowledged, that")
    text = log.read_text(errors="replace")
    assert "Directly load AOT compilation" in text, text[-3000:]
    assert answer.strip(), text[-3000:]
    assert files_under(mount) == before
