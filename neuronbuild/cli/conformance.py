"""``neuronbuild conformance``: the kit a user with hardware runs on a real compile host or Neuron
node, printing the pass/fail table to paste into a bug report (issue 18 item 10)."""

from __future__ import annotations

import importlib
import platform
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click

from neuronbuild import __version__
from neuronbuild.cli.common import load_or_exit
from neuronbuild.errors import UserError
from neuronbuild.human import format_table
from neuronbuild.ui.console import echo_json
from neuronbuild.ui.options import cache_option, json_option

if TYPE_CHECKING:
    from neuronbuild.recipe import Recipe

DEFAULT_TIMEOUT_S = 900
"""How long each node start may run (seconds): loading a 70B model's graphs takes minutes,
compiling one graph takes longer, so C1's start still running is compiling; R3's start stops as
soon as vLLM serves."""


@click.command()
@click.argument("recipe_path", metavar="RECIPE", type=click.Path(dir_okay=False))
@click.option(
    "--host",
    type=click.Choice(["compile", "node"]),
    default="compile",
    show_default=True,
    help="Where this runs: the CPU compile host, or a Neuron node (also starts vLLM twice).",
)
@click.option(
    "--timeout",
    metavar="SECONDS",
    type=click.IntRange(1, 86400),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds each node start may run: C1's without one entry (still running counts as "
    "compiling), R3's until vLLM serves.",
)
@cache_option
@json_option()
def conformance(recipe_path: str, host: str, timeout: int, cache: str, as_json: bool) -> None:
    """Check what only real hardware settles about RECIPE's latest build in --cache: installed
    versions and the Neuron SDK release they name, the compile route, entry layout and markers,
    the optimization level, NKI binary paths and (with --host node) that serve with one entry
    removed fails at start and whether a start writes the Precompile Cache. Prints one row per check
    (PASS, FAIL or SKIP with why); exits 1 when one failed.

    \b
    Examples:
      neuronbuild conformance recipe.yaml --cache s3://bucket/store
      neuronbuild conformance recipe.yaml --cache s3://bucket/store --host node --json
    """
    recipe = load_or_exit(recipe_path)
    run_kit = kit_of(recipe)
    digest, checks = run_kit(recipe, cache, "node" if host == "node" else "compile", timeout)
    about = {
        "neuronbuild": __version__,
        "host": host,
        "machine": platform.machine(),
        "recipe": recipe.name,
        "manifest": digest,
    }
    if as_json:
        echo_json("conformance", {**about, "checks": [c.to_json() for c in checks]})
    else:
        click.echo(" ".join(f"{k}={v}" for k, v in about.items()))
        rows = [["ROW", "STATUS", "CHECK"]] + [[c.row, c.status, c.what] for c in checks]
        header, *lines = format_table(rows)
        click.echo(header)
        for line, check in zip(lines, checks, strict=True):
            click.echo(line)
            if check.why:
                click.echo(f"      why: {check.why}")
            for name, seen in check.evidence.items():
                click.echo(f"      {name}: {seen}")
    if exit_code(checks):
        sys.exit(exit_code(checks))


def exit_code(checks: Sequence[Any]) -> int:
    """0 when every check (a kit's, each with a ``status``) passed or was skipped, 1 when one
    failed."""
    return 1 if any(c.status == "FAIL" for c in checks) else 0


def kit_of(recipe: Recipe) -> Callable[[Recipe, str, str, float], tuple[str, list[Any]]]:
    """The conformance kit of ``recipe``'s engine (its ``conformance_kit``), imported.

    Raises:
        UserError: the engine offers no kit (naming the engines that do, and their targets).
    """
    from neuronbuild.engines.registry import ENGINES, engine_for, engine_names, get_engine

    path = engine_for(recipe).conformance_kit
    if path is None:
        kits = [n for n in engine_names() if get_engine(n).conformance_kit is not None]
        targets = [t for kit in kits for t in ENGINES[kit].targets]
        raise UserError(
            f"{recipe.source}: engine is {recipe.engine}, which offers no conformance kit; the "
            f"kit checks recipes of engine {' or '.join(kits)} (target {', '.join(targets)})"
        )
    module, _, name = path.partition(":")
    kit: Callable[[Recipe, str, str, float], tuple[str, list[Any]]]
    kit = getattr(importlib.import_module(module), name)
    return kit
