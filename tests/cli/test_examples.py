"""The files under ``examples/`` parse, and every neuronbuild command line in them names a command
and options that exist (so a renamed option breaks this test, not a user's CI)."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

from neuronbuild.cli.main import all_commands
from neuronbuild.errors import UserError
from neuronbuild_runtime.serve_options import split_serve_args
from tests.conftest import REPO

EXAMPLES = REPO / "examples"
SHELL_OPERATORS = {"&&", "||", ";", "|", ">", "2>", "&"}


def parse(path: Path) -> list[Any]:
    """The file's documents: YAML (all of them), JSON, or a Dockerfile's instructions as
    ``[instruction, argument]`` pairs (exec-form arguments as lists)."""
    text = path.read_text()
    if path.suffix in (".yml", ".yaml"):
        return [d for d in yaml.safe_load_all(text) if d is not None]
    if path.suffix == ".json":
        return [json.loads(text)]
    if path.name == "Dockerfile":
        joined = re.sub(r"\\\n", " ", text)
        instructions = []
        for line in joined.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            word, _, rest = line.strip().partition(" ")
            assert word.isupper(), f"{path}: not an instruction: {line[:60]}"
            rest = rest.strip()
            instructions.append([word, json.loads(rest) if rest.startswith("[") else rest])
        return instructions
    return []


def strings_and_argvs(node: Any) -> Iterator[list[str]]:
    """Every command line in a parsed document, as argv lists: string lists whose first item
    is ``neuronbuild`` (a container's ``command`` joined with its ``args``), and each
    ``neuronbuild ...`` in shell text."""
    if isinstance(node, dict):
        command, args = node.get("command"), node.get("args")
        if isinstance(command, list) and all(isinstance(a, str) for a in command):
            yield [*command, *(args if isinstance(args, list) else [])]
        elif isinstance(args, list) and "image" in node:  # args alone: the image's entrypoint
            yield ["neuronbuild", "serve", *map(str, args)]
        for key, value in node.items():
            if key not in ("command", "args"):
                yield from strings_and_argvs(value)
    elif isinstance(node, list):
        if node and all(isinstance(a, str) for a in node) and node[0] == "neuronbuild":
            yield list(node)
        else:
            for item in node:
                yield from strings_and_argvs(item)
    elif isinstance(node, str):
        for line in node.splitlines():
            if "neuronbuild " not in line or line.lstrip().startswith("#"):
                continue
            tokens = shlex.split(line, comments=True)
            for i, token in enumerate(tokens):
                if token == "neuronbuild" or token.endswith("/bin/neuronbuild"):
                    rest = tokens[i:]
                    end = next((j for j, t in enumerate(rest) if t in SHELL_OPERATORS), len(rest))
                    yield rest[:end]
                    break


def dockerfile_argvs(instructions: list[Any]) -> Iterator[list[str]]:
    entrypoint = next((a for w, a in instructions if w == "ENTRYPOINT"), None)
    cmd = next((a for w, a in instructions if w == "CMD"), [])
    if entrypoint is not None:
        yield [*entrypoint, *cmd]
    for word, argument in instructions:
        if word == "RUN":
            yield from strings_and_argvs(argument)


def command_lines(path: Path) -> list[list[str]]:
    docs = parse(path)
    if path.name == "Dockerfile":
        return list(dockerfile_argvs(docs))
    return [argv for doc in docs for argv in strings_and_argvs(doc)]


def problems(argv: list[str]) -> list[str]:
    """What in ``neuronbuild SUBCOMMAND ...`` does not exist in the CLI."""
    if len(argv) < 2 or argv[1] not in all_commands():
        return [f"no command {argv[1:2]}"]
    command: click.Command = all_commands()[argv[1]]
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    args = argv[2:]
    if argv[1] == "serve":  # vLLM server options pass through, checked as serve checks them
        own = {o: not getattr(p, "is_flag", False) for p in command.params for o in p.opts}
        try:
            args, _ = split_serve_args(args, own)
        except UserError as exc:
            return [f"serve: {exc}"]
    out = []
    for token in args:
        if token.startswith("-") and not re.fullmatch(r"-?\d+", token):
            name = token.split("=", 1)[0]
            if name not in known:
                out.append(f"{argv[1]}: no option {name}")
    return out


FILES = sorted(p for p in EXAMPLES.rglob("*") if p.is_file() and p.name != "README.md")


def test_there_is_an_example_for_each_engine_the_issue_names() -> None:
    names = {str(p.relative_to(EXAMPLES)) for p in FILES}
    assert {
        "github-actions/neuronbuild.yml",
        "aws-batch/compile-job-definition.json",
        "aws-batch/seal-job-definition.json",
        "kubernetes/compile-job.yaml",
        "kubernetes/seal-job.yaml",
        "inference-node/Dockerfile",
        "inference-node/deployment.yaml",
    } <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_each_example_parses_and_names_only_commands_and_options_that_exist(path: Path) -> None:
    lines = [argv for argv in command_lines(path) if argv and argv[0].endswith("neuronbuild")]
    assert lines, f"{path}: no neuronbuild command found"
    for argv in lines:
        assert not problems(argv), (argv, problems(argv))


def test_the_examples_shard_seal_promote_pull_and_serve() -> None:
    used = {(argv[1], t) for p in FILES for argv in command_lines(p) for t in argv[2:]}
    commands = {c for c, _ in used}
    assert {"compile", "seal", "tag", "pull", "serve"} <= commands
    assert ("compile", "--shard") in used and ("seal", "--shards") in used
    shards = {t for c, t in used if c == "compile" and t.startswith("auto/")}
    assert shards == {"auto/2"}


def test_the_checker_catches_a_misspelt_option_and_command() -> None:
    assert problems(["neuronbuild", "compile", "r.yaml", "--shards", "0/2"]) == [
        "compile: no option --shards"
    ]
    assert problems(["neuronbuild", "seel", "r.yaml"]) == ["no command ['seel']"]
    assert not problems(["neuronbuild", "serve", "--ref", "a/b", "--port", "8000"])
    assert problems(["neuronbuild", "serve", "--ref", "a/b", "--prot", "8000"]) == [
        "serve: --prot: unknown option; did you mean --port?"
    ]
