"""Every environment variable neuronbuild reads goes through one typed reader (issue 20).

A scan of the product's source (``neuronbuild/``, ``runtime/``) with :mod:`ast` fails on a read of
the process environment outside ``envs.py`` and ``start_env.py`` (``os.environ``, ``os.environb``,
``os.getenv``), and on a typed variable's name looked up in any mapping outside its
:class:`~neuronbuild.envs.Var` (``m[NAME]``, ``m.get(NAME)``, ``m.pop(NAME)``). Passing a whole
mapping to a child process, testing ``NAME in m`` (classification) and writing ``m[NAME] = ...``
are not reads of a value. And every ``Var`` turns a bad value into one line naming the variable,
exit 2.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from neuronbuild import envs
from neuronbuild.errors import EnvInvalid
from tests.lib.builders import REPO, model_folder, neuron_recipe
from tests.neuron_double import SITE

PRODUCT = (REPO / "neuronbuild", REPO / "runtime")
READERS = {REPO / "neuronbuild" / "envs.py", REPO / "neuronbuild" / "start_env.py"}
PROCESS_ENV = {"environ", "environb", "getenv", "getenvb"}
VARS = {value.name: value for value in vars(envs).values() if isinstance(value, envs.Var)}
VARS.update({var.name: var for var in envs.SHARD_INDEXES})
LOOKUPS = {"get", "pop", "setdefault"}


def names_of(tree: ast.Module) -> dict[str, str]:
    """Module-level names bound to a typed variable's name (``X = envs.NAME`` or ``X = "NAME"``)."""
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, name = node.targets[0], variable_name(node.value, {})
            if isinstance(target, ast.Name) and name is not None:
                out[target.id] = name
    return out


def variable_name(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """The typed variable ``node`` names: a literal, ``envs.CONSTANT`` or a module alias."""
    if isinstance(node, ast.Constant) and node.value in VARS:
        return str(node.value)
    attribute = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
    if attribute and node.value.id == "envs" and getattr(envs, node.attr, None) in VARS:  # type: ignore[attr-defined]
        return str(getattr(envs, node.attr))  # type: ignore[attr-defined]
    if isinstance(node, ast.Name):
        return aliases.get(node.id)
    return None


def reads_in(path: Path) -> list[str]:
    """``path:line: what`` for each read of the environment outside the typed readers."""
    tree = ast.parse(path.read_text(), str(path))
    aliases = names_of(tree)
    found = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Attribute) and node.attr in PROCESS_ENV:
            if isinstance(node.value, ast.Name) and node.value.id == "os":
                what = f"os.{node.attr}"
        elif isinstance(node, ast.ImportFrom) and node.module == "os":
            if taken := [a.name for a in node.names if a.name in PROCESS_ENV]:
                what = f"from os import {', '.join(taken)}"
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if name := variable_name(node.slice, aliases):
                what = f"[{name}]"
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
            name = variable_name(node.args[0], aliases) if node.func.attr in LOOKUPS else None
            if name is not None:
                what = f".{node.func.attr}({name})"
        if what is not None:
            found.append(f"{path.relative_to(REPO)}:{getattr(node, 'lineno', 0)}: {what}")
    return found


def product_files() -> list[Path]:
    return sorted(p for root in PRODUCT for p in root.rglob("*.py") if p not in READERS)


def test_no_product_code_reads_the_environment_outside_envs() -> None:
    found = [line for path in product_files() for line in reads_in(path)]
    assert found == [], "read these through a Var in neuronbuild/envs.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import os\nx = os.environ.get('HOME')\n", ["os.environ"]),
        ("import os\nx = os.getenv('HOME')\n", ["os.getenv"]),
        ("from os import environ\n", ["from os import environ"]),
        ("import os\nx = os.environb\n", ["os.environb"]),
        (
            "from neuronbuild import envs\nx = m.get(envs.NEURONBUILD_NEURON_COMPILE_GIB)\n",
            [".get(NEURONBUILD_NEURON_COMPILE_GIB)"],
        ),
        ("x = m['RAY_ADDRESS']\n", ["[RAY_ADDRESS]"]),
        (
            "from neuronbuild import envs\nN = envs.NEURONBUILD_NODE_TARGET\nx = m[N]\n",
            ["[NEURONBUILD_NODE_TARGET]"],
        ),
        # Not reads: a mapping passed on, a membership test, a write, another variable's name.
        ("import subprocess\nsubprocess.run(['x'], env=env)\n", []),
        ("from neuronbuild import envs\nok = envs.RAY_ADDRESS in m\n", []),
        ("from neuronbuild import envs\nenv[envs.VLLM_NEURON_PARALLEL_TRACE_WORKERS] = '1'\n", []),
        ("x = m.get('VLLM_CACHE_ROOT_NOT_A_VAR')\n", []),
    ],
)
def test_the_scan_finds_reads_and_only_reads(
    tmp_path: Path, source: str, expected: list[str]
) -> None:
    path = REPO / "neuronbuild" / f"_scan_probe_{tmp_path.name}.py"
    path.write_text(source)
    try:
        assert [line.split(": ", 1)[1] for line in reads_in(path)] == expected
    finally:
        path.unlink()


BAD = {
    envs.NEURONBUILD_S3_READ_TIMEOUT: "soon",
    envs.NEURONBUILD_HEARTBEAT_SECONDS: "-1",
    envs.NEURONBUILD_NEURON_COMPILE_GIB: "lots",
    envs.NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS: "abc",
    envs.VLLM_NEURON_PARALLEL_TRACE_WORKERS: "two",
    envs.JOB_COMPLETION_INDEX: "first",
    envs.AWS_BATCH_JOB_ARRAY_INDEX: "-3",
    envs.NEURONBUILD_NODE_TARGET: "trn2.48xlarge",
    envs.NEURONBUILD_VLLM_COMPAT: "off",
}
"""A value each typed variable refuses."""
ANY_TEXT = {
    envs.VLLM_CACHE_ROOT,
    envs.DOCKER_CONFIG,
    envs.REGISTRY_AUTH_FILE,
    envs.NEURONBUILD_CACHE,
    envs.NEURONBUILD_POLICY,
    envs.SIGSTORE_ID_TOKEN,  # any text is a token to IdentityToken, which refuses it in one line
    envs.NEURONBUILD_NKI_INTERMEDIATE_CACHE,
    envs.NO_COLOR,
    envs.XDG_CACHE_HOME,
    envs.RAY_ADDRESS,
}
"""Variables any text is a value of (a path, a URL, a flag set by being there)."""


def test_every_var_is_covered_by_a_bad_value_or_takes_any_text() -> None:
    assert set(BAD) | ANY_TEXT == set(VARS)
    for name in ANY_TEXT:
        VARS[name].get({name: "some text \u00e9"})  # never raises


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_of_each_var_is_one_error_naming_it(name: str) -> None:
    with pytest.raises(EnvInvalid) as raised:
        VARS[name].get({name: BAD[name]})
    message = str(raised.value)
    assert message.startswith(f"${name}={BAD[name]!r}: ") and "\n" not in message


COMMANDS: dict[str, list[str]] = {
    envs.NEURONBUILD_NEURON_COMPILE_GIB: ["compile", "{neuron}"],
    envs.NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS: ["compile", "{neuron}"],
    envs.VLLM_NEURON_PARALLEL_TRACE_WORKERS: ["compile", "{neuron}"],
    envs.JOB_COMPLETION_INDEX: ["compile", "{neuron}", "--dry-run", "--shard", "auto/2"],
    envs.AWS_BATCH_JOB_ARRAY_INDEX: ["compile", "{neuron}", "--dry-run", "--shard", "auto/2"],
    envs.NEURONBUILD_HEARTBEAT_SECONDS: ["compile", "{neuron}", "--dry-run"],
}
"""A command that reads each variable before it starts an engine (the CLI edge: exit 2)."""


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_command_given_a_bad_value_exits_2_with_one_line_naming_it(
    name: str, tmp_path: Path
) -> None:
    import yaml

    recipe = tmp_path / "r.yaml"
    recipe.write_text(yaml.safe_dump(neuron_recipe(model=str(model_folder(tmp_path)))))
    argv = [str(recipe) if a == "{neuron}" else a for a in COMMANDS[name]]
    env: dict[str, Any] = {k: v for k, v in envs.process_environ().items() if k not in BAD}
    env.update({name: BAD[name], "XDG_CACHE_HOME": str(tmp_path / "cache")})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), env.get("PYTHONPATH")]))
    argv += ["--cache", str(tmp_path / "store")]
    result = subprocess.run(
        [sys.executable, "-m", "neuronbuild", *argv], env=env, capture_output=True, text=True
    )
    assert result.returncode == 2, (result.stdout, result.stderr)
    # the recipe's own warnings (a trn2 pin with no argument table here) may come first
    lines = result.stderr.strip().splitlines()
    [line] = [text for text in lines if not text.startswith("warning: ")]
    assert line.startswith("error: ") and f"${name}={BAD[name]!r}: " in line, result.stderr
