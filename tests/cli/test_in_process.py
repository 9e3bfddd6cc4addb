"""The in-process runner the command-line tests use (``tests/lib/commands.py``) behaves as a
fresh process would where a test could tell: the verbosity a command sets ends with it, and a
``serve`` that reaches the exec of vLLM fails instead of replacing the test process."""

from __future__ import annotations

from pathlib import Path

from neuronbuild.store.cas import Store
from neuronbuild.ui import verbosity
from tests.lib.builders import cpu_recipe, model_folder, publish_units
from tests.lib.commands import in_process, neuronbuild


def test_a_commands_verbosity_ends_with_it() -> None:
    assert neuronbuild("-q", "isa").returncode == 0
    assert verbosity.verbosity() == verbosity.NORMAL
    verbosity.set_verbosity(verbosity.VERBOSE)
    try:
        assert neuronbuild("isa").returncode == 0
        assert verbosity.verbosity() == verbosity.VERBOSE  # put back as the test had it
    finally:
        verbosity.set_verbosity(verbosity.NORMAL)


def test_serve_reaching_the_exec_of_vllm_in_process_fails_and_execs_nothing(
    tmp_path: Path,
) -> None:
    model = model_folder(tmp_path)
    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_units(store, cpu_recipe(cpu_isa="host", model=str(model)), tmp_path, "a")
    root = str(tmp_path / "root")
    done = in_process(
        ["serve", "--manifest", digest, "--cache", store.url, "--vllm-cache-root", root]
    )
    assert done.returncode == 1
    assert "serve reached the exec of vLLM in the test process" in done.stderr
