"""The ``neuronbuild`` command group: its global options and the console entry point.

The group and its global options live here; the commands, by what they work on, in
:mod:`~neuronbuild.cli.build` (recipes to sealed manifests), :mod:`~neuronbuild.cli.store` (what a
store holds), :mod:`~neuronbuild.cli.diagnose` (why a unit misses, the host's ISA) and
``neuronbuild_runtime.cli`` (``serve``, ``pull``, ``capture``: the node side).

Exit codes (DESIGN.md): 0 done; 1 some units failed; 2 bad input; 3 store or network failure.
"""

from __future__ import annotations

import copy
import importlib

import click

from neuronbuild import __version__
from neuronbuild.ui.console import run
from neuronbuild.ui.options import QUIET_HELP, VERBOSE_HELP, check_verbosity, verbosity_options
from neuronbuild.ui.verbosity import set_verbosity

COMMANDS: dict[str, tuple[str, str, str]] = {
    "capture": (
        "neuronbuild_runtime.cli",
        "capture",
        "Give back what a node's first start wrote.",
    ),
    "compile": (
        "neuronbuild.cli.build",
        "compile_",
        "Compile what the store lacks, publish it, seal it.",
    ),
    "conformance": (
        "neuronbuild.cli.conformance",
        "conformance",
        "Check what only hardware settles.",
    ),
    "doctor": ("neuronbuild.cli.diagnose", "doctor", "Print every factor of every unit key."),
    "gc": ("neuronbuild.cli.store", "gc", "Delete what no ref or ref history reaches."),
    "image": ("neuronbuild.cli.image", "image", "Build and push the node image of a build."),
    "isa": ("neuronbuild.cli.diagnose", "isa", "Print this host's CPU instruction set."),
    "ls": (
        "neuronbuild.cli.store",
        "ls_",
        "List the store's refs, their signers and its contents.",
    ),
    "plan": ("neuronbuild.cli.build", "plan", "List exactly the graphs vLLM will compile."),
    "pull": (
        "neuronbuild_runtime.cli",
        "pull",
        "Copy a build, verified, into a node's local cache.",
    ),
    "probe": (
        "neuronbuild_runtime.cli",
        "probe",
        "Prove a running server answers as CI's and compiled nothing.",
    ),
    "push": ("neuronbuild.cli.store", "push", "Publish a build from one store to another."),
    "seal": (
        "neuronbuild.cli.build",
        "seal",
        "Write each recipe's manifest once its units are in.",
    ),
    "serve": (
        "neuronbuild_runtime.cli",
        "serve",
        "Serve a build with vLLM, compilation forbidden.",
    ),
    "sign": ("neuronbuild.cli.attest", "sign", "Sign a build (a key, a KMS key or keyless)."),
    "status": ("neuronbuild.cli.store", "status", "Show which graphs of a recipe the store holds."),
    "tag": ("neuronbuild.cli.store", "tag", "Point a ref at what another ref or a manifest names."),
    "validate": ("neuronbuild.cli.build", "validate", "Check recipes with vLLM-Neuron's rules."),
    "verify": (
        "neuronbuild.cli.store",
        "verify",
        "Check a build is complete; list its signatures.",
    ),
}
"""Each subcommand: the module that defines it, its name there, and its short help (what
``neuronbuild --help`` lists). A subcommand's module is imported only when that subcommand runs,
so ``neuronbuild --help`` imports none of them (nor pydantic, fsspec or yaml), and a command
imports only its own module's wing."""


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (click's documented lazy-loading
    pattern), from :data:`COMMANDS`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return None
        return load_command(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, COMMANDS[name][2]) for name in sorted(COMMANDS)])


def load_command(name: str) -> click.Command:
    """The subcommand ``name`` of :data:`COMMANDS`, imported: a copy of the module's command with
    its short help and ``-v``/``-q`` accepted after its name too (the module's own object is left
    as it is: ``python -m neuronbuild_runtime`` runs ``serve`` without them). Made once."""
    if name not in _loaded:
        module, attribute, short_help = COMMANDS[name]
        command = copy.copy(getattr(importlib.import_module(module), attribute))
        command.params = [*command.params, *verbosity_options()]  # -v/-q after the name too
        command.short_help = short_help
        _loaded[name] = command
    return _loaded[name]


_loaded: dict[str, click.Command] = {}


def print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """``--version`` (click's eager callback): neuronbuild's version, then each engine's
    toolchain as installed here, and exit."""
    if value and not ctx.resilient_parsing:
        from neuronbuild.engines.registry import installed_toolchains

        click.echo(f"neuronbuild {__version__}")
        for name, found in installed_toolchains().items():
            listed = ", ".join(f"{d} {v or '(not installed)'}" for d, v in found.items())
            click.echo(f"engine {name}: {listed}")
        ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=print_version,
    help="Print neuronbuild's version and the engines' installed toolchains, and exit.",
)
@click.option("-v", "--verbose", is_flag=True, help=VERBOSE_HELP)
@click.option("-q", "--quiet", is_flag=True, help=QUIET_HELP)
def cli(verbose: bool, quiet: bool) -> None:
    """Compile vLLM's graphs ahead of time, store them content-addressed, serve them.

    \b
    Typical flow:
      neuronbuild validate recipe.yaml     check a recipe against vLLM-Neuron's rules
      neuronbuild plan recipe.yaml         list every graph that will be compiled
      neuronbuild compile recipe.yaml      compile and publish them to the store
      neuronbuild serve recipe.yaml        serve them with vLLM, compilation forbidden

    -v and -q go before or after the command: neuronbuild compile -q recipe.yaml.
    """
    set_verbosity(check_verbosity(verbose, quiet))


def main() -> None:
    """Console entry point (``neuronbuild``)."""
    run(cli)


def all_commands() -> dict[str, click.Command]:
    """Every subcommand by its name, imported (for tests and documentation that walk them all)."""
    return {name: load_command(name) for name in COMMANDS}
