"""The diagnosis commands: ``doctor`` (why a unit misses the store) and ``isa`` (this host's CPU
instruction set)."""

from __future__ import annotations

import json
from typing import Any

import click

from neuronbuild.cli.common import load_or_exit
from neuronbuild.engines.vllm_cpu.isa import host_isa
from neuronbuild.ui.console import echo_json
from neuronbuild.ui.formatting import use_colour
from neuronbuild.ui.options import cache_option, json_option
from neuronbuild.ui.verbosity import key_text


@click.command()
@click.argument("recipe_path", metavar="RECIPE", type=click.Path(dir_okay=False))
@cache_option
@json_option()
def doctor(recipe_path: str, cache: str, as_json: bool) -> None:
    """Print every factor of every unit key of RECIPE, whether the store holds it, and for a
    miss which factor differs from the recipe's last sealed build.

    \b
    Examples:
      neuronbuild doctor recipe.yaml --cache s3://bucket/store
    """
    from neuronbuild.orchestrate.doctor import diagnose, differing_factors, summary
    from neuronbuild.store.cas import Store

    recipe = load_or_exit(recipe_path)
    store = Store(cache)
    units = diagnose(recipe, store)
    if as_json:
        echo_json(
            "doctor",
            {"store": store.url, "name": recipe.name, "units": [u.to_json() for u in units]},
        )
        return
    colour = use_colour()

    def echo(line: str, **style: Any) -> None:
        styled = colour and any(style.values())
        click.echo(click.style(line, **style) if styled else line, color=colour)

    echo(summary(units), bold=True)
    for unit in units:
        labels = ", ".join(" ".join(f"{k}={v}" for k, v in g.items()) for g in unit.graphs)
        if unit.cached:
            echo(f"HIT  {key_text(unit.key)} ({labels})", fg="green")
        else:
            echo(f"MISS {key_text(unit.key)} ({labels})", fg="red", bold=True)
        if unit.differences:  # the answer first: what differs, and why that misses
            echo(f"     differs from {unit.compared_with}:")
            for line in unit.differences:
                echo(f"       {line}", fg="yellow", bold=True)
            echo("     why it misses:")
            for line in unit.explanations:
                echo(f"       {line}")
            echo("     every factor:")
        elif unit.problems:  # the store holds it only in part: say what is gone
            where = f"sealed in {unit.sealed_in}" if unit.sealed_in else "in the store"
            echo(f"     {where}, but incomplete ({unit.state}); compile it again:")
            for line in unit.problems:
                echo(f"       {line}", fg="yellow", bold=True)
        elif not unit.cached:
            echo("     no sealed build of this graph to compare with; compile it")
        indent = " " * (7 if unit.differences else 5)
        differing = set(differing_factors(unit))
        for name, value in unit.factors.items():
            mark = name in differing or any(d.startswith(f"{name}.") for d in differing)
            factor = f"{indent}{name}: {json.dumps(value, sort_keys=True)}"
            echo(factor, fg="yellow" if mark else None)


@click.command()
@json_option()
def isa(as_json: bool) -> None:
    """Print this host's CPU instruction set, as a recipe's cpu_isa names it.

    \b
    Examples:
      neuronbuild isa
      neuronbuild isa --json
    """
    if as_json:
        echo_json("isa", {"isa": host_isa()})
    else:
        click.echo(host_isa())
