"""One ref serves CPU nodes of two instruction sets from their own real builds (issue 44), with the
real vLLM CPU build and the demo model: CI on this host compiles the demo for its own set; CI on a
host of another set (this process made to read as one: ``isa.host_isa``, the one fact a host's
set is known by) compiles the same recipe for that set and adds it to the ref's index with
``--index``; then a node of each set serves ``cpu-tiny-llama/latest``, says which build it picked,
and its real vLLM, started from that build with compilation forbidden, answers. Both builds were
compiled here, so both answer alike. Marked ``vllm``: two real compiles and two real servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.demo.server import Server, free_port
from neuronbuild.engines.vllm_cpu import isa as cpu_isa
from neuronbuild.store.cas import Store
from tests.lib.commands import in_process
from tests.lib.commands import neuronbuild as nb
from tests.lib.demo_build import lay_out_demo

pytestmark = pytest.mark.vllm

PROMPT = "The capital of France is"


def as_host(monkeypatch: pytest.MonkeyPatch, isa: str) -> None:
    monkeypatch.setattr(cpu_isa, "host_isa", lambda: isa)


def test_one_ref_serves_a_node_of_each_instruction_set_from_its_own_build(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    demo = lay_out_demo(tmp_path / "demo")
    host = cpu_isa.host_isa()
    other = "x86_64-v3" if host.startswith("aarch64") else "aarch64"
    recipes = {}
    for isa in (host, other):
        data = {**yaml.safe_load(demo.read_text()), "cpu_isa": isa}
        recipes[isa] = demo.parent / f"{isa}.yaml"
        recipes[isa].write_text(yaml.safe_dump(data))
    store = tmp_path / "store"
    builds = {}
    for isa, added in ((host, ()), (other, ("--index",))):
        as_host(monkeypatch, isa)  # CI on a host of this set
        done = nb("compile", str(recipes[isa]), "--cache", str(store), "--json", *added)
        assert done.returncode == 0, done.stderr[-3000:]
        [report] = json.loads(done.stdout)["recipes"]
        builds[isa] = report["manifest"]
    index = Store(str(store)).get_ref("cpu-tiny-llama", "latest")
    assert index is not None and Store(str(store)).get_index(index).manifests() == sorted(
        builds.values()
    )
    answers = {}
    for isa in (host, other):
        as_host(monkeypatch, isa)  # a node of this set
        port = free_port()

        def run(prepared: Any, isa: str = isa, port: int = port) -> None:
            server = Server(prepared.argv, port, tmp_path / f"{isa}.log", prepared.env)
            server.cwd = prepared.cwd
            with server:
                server.wait_ready()
                answers[isa] = server.complete(PROMPT)

        argv = ["serve", "--ref", "cpu-tiny-llama/latest", "--cache", str(store)]
        argv += ["--vllm-cache-root", str(tmp_path / f"node-{isa}"), "--workdir", str(demo.parent)]
        argv += ["--port", str(port), "--host", "127.0.0.1"]
        served = in_process(argv, exec_vllm=run)
        assert served.returncode == 0, served.stderr[-3000:]
        assert f"serving {builds[isa]}, built for cpu {isa}, " in served.stderr
        assert "1 other build does not fit" in served.stderr
    assert answers[host] and answers[host] == answers[other]
