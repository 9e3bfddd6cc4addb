"""``serve`` starts vLLM with exactly the environment that forbids compiling, for every engine:
the engine's "never compile" switches, the cache root it laid out, the keyed environment the
manifest was compiled with (whatever the node's own values), nothing that would change vLLM's
keys unnoticed, and everything else passed through.

vLLM is not started: ``os.execve`` is replaced by a recorder, and everything before it (resolve,
fetch, verify, lay out) runs for real.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neuronbuild import start_env
from neuronbuild.store.cas import Store
from neuronbuild_runtime import cli as runtime_cli
from tests.conftest import cpu_recipe, neuron_recipe
from tests.lib.builders import model_folder, publish_units

# Per engine: the recipe, a keyed variable with its value at compile and the node's own value, and
# the variables serve must set (the engine's "never compile" contract, DESIGN.md "Engines").
ENGINES: dict[str, dict[str, Any]] = {
    "cpu": {
        "recipe": lambda: cpu_recipe(name="served", cpu_isa="host", model="./model"),
        "keyed": ("VLLM_CPU_OMP_THREADS_BIND", "0-1", None),
        "contract": {"VLLM_FORCE_AOT_LOAD": "1", "HF_HUB_OFFLINE": "1"},
        "roots": ("VLLM_CACHE_ROOT",),
        # Not in any key, but would change vLLM's own: never reaches vLLM.
        "dropped": {"VLLM_PLUGINS": "evil"},
        "serve_args": [],
    },
    "neuron": {
        "recipe": lambda: neuron_recipe(
            {"num_batched_tokens_buckets": [4096], "num_seqs_buckets": [8]},
            name="served",
            model="./model",
        ),
        "keyed": ("NEURON_CC_FLAGS", "--optlevel=2", None),
        "contract": {
            "VLLM_NEURON_DISABLE_WARMUP_COMPILE": "1",
            "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND": "1",
            "NEURON_LIBTORCH_ASSERT_CACHE_HIT": "1",
            "HF_HUB_OFFLINE": "1",
        },
        # LNL's own cache root is pinned to the layout too (fidelity row B8).
        "roots": ("VLLM_CACHE_ROOT", "NEURON_LIBTORCH_CACHE_ROOT"),
        "dropped": {},
        # This host has no Neuron SDK and no Trainium: the operator accepts that, explicitly.
        "serve_args": [
            arg
            for name in (
                "neuronx-cc",
                "vllm-neuron",
                "target",
                "libtorch-neuronx-lite",
                "nki",
                "vllm",
            )
            for arg in ("--allow-mismatch", name)
        ],
    },
}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_serve_execs_vllm_with_exactly_the_never_compile_environment(
    engine: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = ENGINES[engine]
    keyed_name, compiled_value, node_value = case["keyed"]
    monkeypatch.chdir(tmp_path)  # where the recipe's ./model resolves, at compile and serve
    model_folder(tmp_path)
    base = {"PATH": os.environ.get("PATH", "/usr/bin"), "HOME": str(tmp_path)}
    # The environment each command was started with (keys and engine environments read it).
    monkeypatch.setattr(start_env, "_STARTED_WITH", {**base, keyed_name: compiled_value})
    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_units(store, case["recipe"](), tmp_path, "a")

    # The node: stale switches, a variable that would change vLLM's keys, one of its own, and
    # (``node_value``) its own value of the keyed variable or none.
    node_env = {
        **base,
        "NB_CLAIMS_NODE_VARIABLE": "kept",
        **{name: "0" for name in case["contract"]},
        **{name: "/somewhere/else" for name in case["roots"]},
        **case["dropped"],
        **({keyed_name: node_value} if node_value is not None else {}),
    }
    monkeypatch.setattr(start_env, "_STARTED_WITH", dict(node_env))
    execs: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(os, "execve", lambda path, argv, env: execs.append((path, argv, env)))
    root = tmp_path / "root"
    result = CliRunner().invoke(
        runtime_cli.serve,
        ["--manifest", digest, "--cache", store.url, "--vllm-cache-root", str(root)]
        + case["serve_args"],
    )
    assert result.exit_code == 0, (result.output, result.exception)
    [(path, argv, env)] = execs
    assert path == argv[0]
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]

    expected = {k: v for k, v in node_env.items() if k not in case["dropped"]}
    expected.update(case["contract"])
    expected.update({name: str(root) for name in case["roots"]})
    expected[keyed_name] = compiled_value  # as compiled, whatever the node has
    assert env == expected
    # What vLLM will find there is what the manifest lists.
    laid = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    listed = sorted(f.path for f in store.get_manifest(digest).files())
    assert [p for p in laid if not p.startswith(".neuronbuild/")] == listed


def test_serve_refuses_an_option_that_would_compile_another_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    model_folder(tmp_path)
    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_units(store, ENGINES["cpu"]["recipe"](), tmp_path, "a")
    execs: list[Any] = []
    monkeypatch.setattr(os, "execve", lambda *a: execs.append(a))
    result = CliRunner().invoke(
        runtime_cli.serve,
        ["--manifest", digest, "--cache", store.url, "--max-model-len", "128"],
    )
    assert result.exit_code != 0
    assert execs == []
