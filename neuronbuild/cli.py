"""The ``neuronbuild`` command line: parses arguments, calls plain functions, prints their data.

Exit codes (DESIGN.md): 0 done; 1 some units failed; 2 bad input; 3 store or network failure.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from neuronbuild import __version__
from neuronbuild.errors import RecipeInvalid, StoreError, UserError
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import Recipe, load_recipe

F = TypeVar("F", bound=Callable[..., Any])


def echo_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False))


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def load_or_exit(path: str) -> Recipe:
    recipe = load_recipe(path)
    for w in recipe.warnings:
        warn(f"{path}: {w}")
    return recipe


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="neuronbuild")
def cli() -> None:
    """Compile vLLM's graphs ahead of time, store them content-addressed, serve them.

    \b
    Typical flow:
      neuronbuild validate recipe.yaml     check a recipe against vLLM-Neuron's rules
      neuronbuild plan recipe.yaml         list every graph that will be compiled
    """


@cli.command()
@click.argument("recipes", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON object per recipe, as a list."
)
def validate(recipes: tuple[str, ...], as_json: bool) -> None:
    """Check each RECIPE with the rules vLLM-Neuron applies at start.

    Every problem is reported, one line each, naming the field, its value and the fix. Exits 2 if
    any recipe is invalid.
    """
    results: list[dict[str, Any]] = []
    for path in recipes:
        try:
            recipe = load_recipe(path)
        except RecipeInvalid as exc:
            results.append(
                {
                    "recipe": path,
                    "valid": False,
                    "errors": [str(e) for e in exc.errors],
                    "warnings": [],
                }
            )
            continue
        plan = build_plan(recipe)
        results.append(
            {
                "recipe": path,
                "valid": True,
                "name": recipe.name,
                "target": recipe.target,
                "graphs": len(plan.graphs),
                "errors": [],
                "warnings": list(recipe.warnings),
            }
        )
    if as_json:
        echo_json(results)
    else:
        for result in results:
            for w in result["warnings"]:
                warn(f"{result['recipe']}: {w}")
            if result["valid"]:
                click.echo(
                    f"ok: {result['recipe']} ({result['name']}, target {result['target']}, "
                    f"{result['graphs']} graphs)"
                )
            for e in result["errors"]:
                click.echo(f"{result['recipe']}: {e}", err=True)
    if not all(r["valid"] for r in results):
        sys.exit(2)


def _plan_table(plan: Plan, held: set[str] | None) -> list[str]:
    head = ["#", "KIND", "BUCKET", "UNIT KEY"] + (["CACHED"] if held is not None else [])
    rows = [head]
    for i, unit in enumerate(plan.units, 1):
        for graph in unit.graphs:
            dims = " ".join(f"{k}={v}" for k, v in graph.dims) or "(all shapes)"
            row = [str(i), graph.kind, dims, unit.key.digest[:19]]
            if held is not None:
                row.append("yes" if unit.key.digest in held else "no")
            rows.append(row)
    widths = [max(len(r[c]) for r in rows) for c in range(len(head))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


@cli.command()
@click.argument("recipe_path", metavar="RECIPE", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the plan as one JSON object.")
@click.option("--explain", is_flag=True, help="Print every factor of every unit key.")
def plan(recipe_path: str, as_json: bool, explain: bool) -> None:
    """List exactly the graphs vLLM will compile for RECIPE, and their compile units."""
    recipe = load_or_exit(recipe_path)
    the_plan = build_plan(recipe)
    held = None
    if as_json:
        echo_json(the_plan.to_json(held))
        return
    click.echo(f"{recipe.name}: target {recipe.target}, engine {the_plan.engine.name}")
    click.echo(f"note: {the_plan.engine.note}")
    for line in _plan_table(the_plan, held):
        click.echo(line)
    totals = ", ".join(f"{kind} {n}" for kind, n in the_plan.totals().items())
    click.echo(f"total: {totals}; {len(the_plan.graphs)} graphs in {len(the_plan.units)} units")
    if explain:
        for unit in the_plan.units:
            click.echo(f"\nunit {unit.key.digest} ({unit.label()})")
            for name, value in unit.key.factors.items():
                click.echo(f"  {name}: {json.dumps(value, sort_keys=True)}")


def main() -> None:
    """Console entry point: runs the CLI and turns neuronbuild's errors into exit codes.

    A user's mistake prints one line per problem and exits 2, never a traceback.
    """
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if exc.exit_code == 2 else exc.exit_code)
    except RecipeInvalid as exc:
        for error in exc.errors:
            click.echo(f"{exc.source}: {error}", err=True)
        sys.exit(exc.exit_code)
    except UserError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except StoreError as exc:
        click.echo(f"store error: {exc}", err=True)
        sys.exit(exc.exit_code)
