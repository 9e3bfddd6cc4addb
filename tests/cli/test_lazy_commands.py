"""The command group loads each subcommand's module only when that subcommand runs
(``neuronbuild.cli.main.COMMANDS``): ``neuronbuild --help`` starts without the recipe, store or
engine wings and the libraries behind them, and every listed command loads and runs."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from neuronbuild.cli.main import COMMANDS, all_commands
from tests.lib.commands import neuronbuild

HEAVY = ("pydantic", "fsspec", "yaml", "s3fs", "torch", "vllm")
"""Libraries ``neuronbuild --help`` must not import (each costs a start up to seconds)."""

HELP_IMPORTS = """
import json, sys
from neuronbuild.cli.main import main
sys.argv = ["neuronbuild", "--help"]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def test_help_imports_no_pydantic_fsspec_or_yaml() -> None:
    # A process of its own: what a fresh interpreter imports is the claim.
    done = subprocess.run(
        [sys.executable, "-c", HELP_IMPORTS], capture_output=True, text=True, check=True
    )
    imported = json.loads(done.stderr.strip().splitlines()[-1])
    heavy = sorted(m for m in imported if m.split(".")[0] in HEAVY)
    assert not heavy, f"neuronbuild --help imported {heavy[:10]}"
    wings = sorted(m for m in imported if m.startswith(("neuronbuild.cli.", "neuronbuild_runtime")))
    assert wings == ["neuronbuild.cli.main"]
    assert "Commands:" in done.stdout


def test_help_lists_every_command_with_its_short_help() -> None:
    done = neuronbuild("--help")
    assert done.returncode == 0
    listed = done.stdout.split("Commands:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in listed] == sorted(COMMANDS)
    for name, (_, _, short) in COMMANDS.items():
        assert f"  {name}" in done.stdout and short in done.stdout


def test_every_listed_command_loads_under_its_name_and_takes_verbosity_after_it() -> None:
    commands = all_commands()
    assert sorted(commands) == sorted(COMMANDS)
    for name, command in commands.items():
        assert isinstance(command, click.Command)
        assert command.name == name
        spellings = [o for p in command.params for o in getattr(p, "opts", [])]
        assert spellings.count("-q") == 1 and spellings.count("-v") == 1, name
    all_commands()  # loading again adds no second -v/-q
    assert [o for p in commands["plan"].params for o in p.opts].count("-v") == 1
    # The runtime's own command is left as it is: python -m neuronbuild_runtime serve takes no -v.
    import neuronbuild_runtime.cli

    assert "-v" not in [o for p in neuronbuild_runtime.cli.serve.params for o in p.opts]


def test_an_unknown_command_is_a_usage_error_naming_it() -> None:
    done = neuronbuild("frobnicate")
    assert done.returncode == 2
    assert "No such command 'frobnicate'" in done.stderr
