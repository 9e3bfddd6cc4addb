"""The ``neuronbuild`` command line: parses arguments, calls plain functions, prints their data.

Exit codes (DESIGN.md): 0 done; 1 some units failed; 2 bad input; 3 store or network failure.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from neuronbuild import __version__, start_env
from neuronbuild.console import (
    NORMAL,
    QUIET,
    VERBOSE,
    detail,
    echo_json,
    format_table,
    info,
    key_text,
    log_tail,
    run,
    set_verbosity,
    use_colour,
)
from neuronbuild.cpu_isa import host_isa
from neuronbuild.errors import RecipeInvalid, StoreError, UnitsFailed, UserError
from neuronbuild.human import ago, count, duration, size, text, when
from neuronbuild.options import (
    cache_option,
    dry_run_option,
    jobs_option,
    json_option,
    local_cache_option,
)
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import Recipe, load_recipe
from neuronbuild.store.names import short
from neuronbuild_runtime.cli import echo_notes, pull, serve

if TYPE_CHECKING:  # not at run time: `neuronbuild serve` must not load the build
    from neuronbuild.build import CompileReport

F = TypeVar("F", bound=Callable[..., Any])

CACHE_OPTION = cache_option


def warn(message: str) -> None:
    info(f"warning: {message}", err=True)


def load_or_exit(path: str) -> Recipe:
    recipe = load_recipe(path)
    for w in recipe.warnings:
        warn(f"{path}: {w}")
    return recipe


def warn_removed_env(recipe: Recipe) -> None:
    """Name every variable of the user's environment kept from the engine process."""
    from neuronbuild.engines import engine_for

    for line in engine_for(recipe).env_warnings(start_env.environ()):
        warn(line)


def version_lines() -> list[str]:
    """``--version``: neuronbuild's version, then each engine's toolchain as installed here."""
    from neuronbuild.engines import get_engine
    from neuronbuild.engines.compiler import UnitCompiler
    from neuronbuild.recipe import TARGET_ENGINES

    lines = [f"neuronbuild {__version__}"]
    for name in sorted(set(TARGET_ENGINES.values())):
        found = UnitCompiler.installed_versions(list(get_engine(name).required_toolchain))
        listed = ", ".join(f"{d} {v or '(not installed)'}" for d, v in found.items())
        lines.append(f"engine {name}: {listed}")
    return lines


def print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        for line in version_lines():
            click.echo(line)
        ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=print_version,
    help="Print neuronbuild's version and the engines' installed toolchains, and exit.",
)
@click.option(
    "-v", "--verbose", is_flag=True, help="More detail: unit keys in full, failed units' log tails."
)
@click.option("-q", "--quiet", is_flag=True, help="Only errors and final result lines.")
def cli(verbose: bool, quiet: bool) -> None:
    """Compile vLLM's graphs ahead of time, store them content-addressed, serve them.

    \b
    Typical flow:
      neuronbuild validate recipe.yaml     check a recipe against vLLM-Neuron's rules
      neuronbuild plan recipe.yaml         list every graph that will be compiled
      neuronbuild compile recipe.yaml      compile and publish them to the store
      neuronbuild serve recipe.yaml        serve them with vLLM, compilation forbidden

    -v and -q go before the command: neuronbuild -q compile recipe.yaml.
    """
    if verbose and quiet:
        raise click.UsageError("-v/--verbose and -q/--quiet: give one of them")
    set_verbosity(VERBOSE if verbose else QUIET if quiet else NORMAL)


def invalid(path: str) -> dict[str, Any]:
    """``validate``'s entry for a recipe that failed (its errors added by the caller)."""
    return {
        "path": path,
        "valid": False,
        "name": None,
        "target": None,
        "n_graphs": None,
        "warnings": [],
    }


@cli.command()
@click.argument("recipes", nargs=-1, required=True, type=click.Path(dir_okay=False))
@json_option()
@click.option("--strict", is_flag=True, help="Treat every warning as an error (fleet builds).")
def validate(recipes: tuple[str, ...], as_json: bool, strict: bool) -> None:
    """Check each RECIPE with the rules vLLM-Neuron applies at start.

    Every problem is reported, one line each, naming the field, its value and the fix. Exits 2 if
    any recipe is invalid (with --strict, also if any has a warning, e.g. a hub model whose
    revision is a branch name).

    \b
    Examples:
      neuronbuild validate recipes/*.yaml
      neuronbuild validate --strict --json recipe.yaml
    """
    results: list[dict[str, Any]] = []
    for path in recipes:
        try:
            recipe = load_recipe(path)
        except RecipeInvalid as exc:
            results.append(
                {
                    **invalid(path),
                    "errors": [str(e) for e in exc.errors],
                }
            )
            continue
        plan = build_plan(recipe)
        if strict and recipe.warnings:
            results.append(
                {
                    **invalid(path),
                    "errors": [f"{w} (--strict)" for w in recipe.warnings],
                }
            )
            continue
        results.append(
            {
                "path": path,
                "valid": True,
                "name": recipe.name,
                "target": recipe.target,
                "n_graphs": len(plan.graphs),
                "errors": [],
                "warnings": list(recipe.warnings),
            }
        )
    if as_json:
        echo_json("validate", {"recipes": results})
    else:
        for result in results:
            for w in result["warnings"]:
                warn(f"{result['path']}: {w}")
            if result["valid"]:
                click.echo(
                    f"ok: {result['path']} ({result['name']}, target {result['target']}, "
                    f"{count(result['n_graphs'], 'graph')})"
                )
            for e in result["errors"]:
                click.echo(f"{result['path']}: {e}", err=True)
    if not all(r["valid"] for r in results):
        sys.exit(2)


def _plan_table(plan: Plan, cached: set[str] | None) -> list[str]:
    head = ["#", "KIND", "BUCKET", "UNIT KEY"] + (["CACHED"] if cached is not None else [])
    rows = [head]
    for i, unit in enumerate(plan.units, 1):
        for graph in unit.graphs:
            dims = " ".join(f"{k}={v}" for k, v in graph.dims) or "(all shapes)"
            row = [str(i), graph.kind, dims, short(unit.key.digest)]
            if cached is not None:
                row.append("yes" if unit.key.digest in cached else "no")
            rows.append(row)
    return format_table(rows)


def units_cached(plan: Plan, cache: str) -> set[str] | None:
    """The plan's unit keys the store at ``cache`` holds. Planning needs no store: when
    ``--cache`` was not given, a missing default store folder leaves the column out (None) and
    an unreachable one is a warning, not an error."""
    from neuronbuild.store.cas import Store

    given = click.get_current_context().get_parameter_source("cache") != ParameterSource.DEFAULT
    try:
        store = Store(cache, missing_ok=not given)
    except StoreError as exc:
        if given:
            raise
        warn(f"{exc}; not saying which units the store holds")
        return None
    if not given and store.is_folder and not Path(store.root).is_dir():
        return None
    return store.built_units(u.key.digest for u in plan.units)


@cli.command()
@click.argument("recipe_path", metavar="RECIPE", type=click.Path(dir_okay=False))
@json_option()
@click.option("--explain", is_flag=True, help="Print every factor of every unit key.")
@CACHE_OPTION
def plan(recipe_path: str, as_json: bool, explain: bool, cache: str) -> None:
    """List exactly the graphs vLLM will compile for RECIPE, their compile units, and which
    units the store holds.

    \b
    Examples:
      neuronbuild plan recipe.yaml
      neuronbuild plan recipe.yaml --explain --cache s3://bucket/store
    """
    recipe = load_or_exit(recipe_path)
    the_plan = build_plan(recipe)
    cached = units_cached(the_plan, cache)
    if as_json:
        echo_json("plan", {"store": cache, **the_plan.to_json(cached)})
        return
    click.echo(f"{recipe.name}: target {recipe.target}, engine {the_plan.engine.name}")
    click.echo(f"note: {the_plan.engine.note}")
    for line in _plan_table(the_plan, cached):
        click.echo(line)
    totals = ", ".join(f"{kind} {n}" for kind, n in the_plan.totals().items())
    click.echo(
        f"total: {totals}; {count(len(the_plan.graphs), 'graph')} in "
        f"{count(len(the_plan.units), 'unit')}"
    )
    if explain:
        for unit in the_plan.units:
            click.echo(f"\nunit {unit.key.digest} ({unit.label()})")
            for name, value in unit.key.factors.items():
                click.echo(f"  {name}: {json.dumps(value, sort_keys=True)}")


LWW_OPTION = click.option(
    "--last-writer-wins",
    is_flag=True,
    help="Allow publishing to an fsspec URL without atomic writes (not folders or s3://).",
)


DRY_RUN_ACTIONS = {"missing": "compile", "cached": "cached", "skipped": "skip"}
"""What a dry run says of a unit of each status: it would compile it, the store holds it, or
another shard owns it."""


def dry_run_table(report: CompileReport) -> list[str]:
    """``compile --dry-run``'s listing: per unit what the real run would do, its label and key."""
    rows = [["WOULD", "UNIT", "KEY"]]
    for unit in report.units:
        action = DRY_RUN_ACTIONS.get(unit["status"], unit["status"])
        if unit.get("shard") is not None and unit["status"] == "skipped":
            action = f"skip (shard {unit['shard']})"
        rows.append([action, report.labels[unit["key"]], key_text(unit["key"])])
    return format_table(rows, indent="  ")


@cli.command(name="compile")
@click.argument(
    "recipe_paths", metavar="RECIPE...", nargs=-1, required=True, type=click.Path(dir_okay=False)
)
@CACHE_OPTION
@LWW_OPTION
@local_cache_option("also keep the sealed build there (write-through).")
@jobs_option("units compiled (Ray: units in flight on the cluster)", default=1)
@click.option(
    "--timeout",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds allowed per unit.",
)
@click.option(
    "--log-dir", type=click.Path(file_okay=False), help="Where per-unit logs go (kept on failure)."
)
@click.option(
    "--shard",
    "shard_text",
    metavar="I/N",
    help="Compile only shard I (from 0) of N of the recipes' units and publish them, without "
    "sealing; auto/N reads I from $JOB_COMPLETION_INDEX or $AWS_BATCH_JOB_ARRAY_INDEX.",
)
@click.option(
    "--executor",
    # executor.EXECUTORS, not imported here: it loads the scheduler, and `neuronbuild serve`
    # (this module) must not (DESIGN.md; tests/test_import_allowlist.py).
    type=click.Choice(("local", "ray")),
    default="local",
    show_default=True,
    help="Where units run: worker processes here, or Ray tasks (pip install 'neuronbuild[ray]').",
)
@click.option(
    "--address",
    help="With --executor ray: the cluster (ray://HOST:10001, HOST:6379 or auto); default "
    "$RAY_ADDRESS, else a local cluster.",
)
@dry_run_option(
    "list each unit and whether it would compile, check the store, model, toolchain and log folder"
)
@json_option()
def compile_(
    recipe_paths: tuple[str, ...],
    cache: str,
    last_writer_wins: bool,
    local_cache: str | None,
    jobs: int,
    timeout: float,
    log_dir: str | None,
    shard_text: str | None,
    executor: str,
    address: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Compile every graph of each RECIPE the store lacks (their units scheduled together),
    publish it, seal one manifest per recipe and move <name>/latest.

    With --shard I/N, compile and publish only this shard's units and seal nothing: run
    `neuronbuild seal` with the same recipes once every shard has run. Refuses (exit 2) when
    installed versions differ from a recipe's toolchain pins or the host from its cpu_isa.
    Exits 1 when some units failed (the others are published, nothing is sealed), 3 when the
    store fails, 128+N on signal N (engine processes ended, nothing half-done published).

    \b
    Examples:
      neuronbuild compile recipe.yaml --cache s3://bucket/store -j 4
      neuronbuild compile recipe.yaml --dry-run
      neuronbuild compile a.yaml b.yaml --cache s3://bucket/store --shard auto/3
    """
    from neuronbuild.build import compile_recipes
    from neuronbuild.executor import executor_for
    from neuronbuild.shard import parse_shard
    from neuronbuild.store.cas import LATEST, Store
    from neuronbuild.store.tiered import TieredStore

    shard = parse_shard(shard_text) if shard_text is not None else None
    if shard is not None and local_cache:
        raise UserError("--local-cache: a shard seals nothing to keep there; drop the option")
    runner = executor_for(executor, address)
    recipes = [load_or_exit(path) for path in recipe_paths]
    for recipe in recipes:
        warn_removed_env(recipe)
    # A missing folder reads as empty and is created by the first write, after every check.
    store = Store(cache, last_writer_wins=last_writer_wins, missing_ok=True)
    local = None
    if local_cache:  # checked before hours of work; a dry run creates nothing
        local = Store(local_cache, create=not dry_run, missing_ok=dry_run)
        local.check_writable(leave_nothing=dry_run, option="--local-cache")
    run = compile_recipes(
        recipes,
        store,
        jobs=jobs,
        timeout=timeout,
        log_dir=Path(log_dir) if log_dir else None,
        dry_run=dry_run,
        shard=shard,
        executor=runner,
    )
    if local is not None and not dry_run:
        tiers = TieredStore(local, store)
        for report in run.recipes:
            if report.manifest:
                tiers.write_through(report.manifest, report.name, LATEST)
        echo_notes(tiers.notes)
    if as_json:
        echo_json("compile", {"store": store.url, "dry_run": dry_run, **run.to_json()})
    else:
        if shard is not None:
            click.echo(
                f"shard {shard}: {run.assigned} of {count(run.units, 'unit')}"
                + ("" if run.assigned else "; no units in this shard, nothing to do")
            )
        for report in run.recipes:
            for unit in report.units:
                if unit["status"] == "failed":
                    label = report.labels.get(unit["key"], "")
                    key = short(unit["key"])
                    click.echo(f"FAILED {label} ({key}): {unit['error']}", err=True)
                    for line in log_tail(unit["log"]) if "log" in unit else []:
                        detail(f"  | {line}", err=True)
                elif unit.get("n_entries_by_origin", {}).get("reused"):
                    entries = unit["n_entries_by_origin"]
                    click.echo(
                        f"{short(unit['key'])}: "
                        f"{count(entries['compiled'], 'entry', 'entries')} compiled, "
                        f"{entries['reused']} reused from the previous build"
                    )
            by_status = report.to_json()["n_units_by_status"].items()
            totals = ", ".join(f"{n} {s}" for s, n in by_status if n)
            click.echo(
                f"{report.name}: {count(len(report.units), 'unit')} ({totals}) "
                f"in {duration(report.seconds)}"
            )
            for line in dry_run_table(report) if dry_run else []:
                click.echo(line)
            if report.manifest:
                click.echo(f"sealed {report.manifest}; {report.ref} -> it in {store.url}")
            elif report.blocked:
                click.echo(f"{report.name}: compiling here would fail: {report.blocked}", err=True)
        if dry_run:
            click.echo("dry run: nothing compiled")
        elif shard is not None and run.assigned and not run.failed:
            names = " ".join(recipe_paths)
            click.echo(
                f"published; once every shard has run: neuronbuild seal {names} "
                f"--cache {store.url} --shards {shard.count}"
            )
    if run.failed:
        what = "this shard's failed units" if shard else "them"
        raise UnitsFailed(f"not sealed: some units failed; fix {what} and run compile again")
    if any(r.blocked for r in run.recipes):
        sys.exit(2)


@cli.command()
@click.argument(
    "recipe_paths", metavar="RECIPE...", nargs=-1, required=True, type=click.Path(dir_okay=False)
)
@CACHE_OPTION
@LWW_OPTION
@click.option(
    "--tag", default="latest", show_default=True, help="The tag each <name>/<tag> ref moves to."
)
@click.option(
    "--shards",
    type=click.IntRange(1),
    help="The N the shards ran with (compile --shard I/N), to name the shard owning each "
    "missing unit.",
)
@json_option()
def seal(
    recipe_paths: tuple[str, ...],
    cache: str,
    last_writer_wins: bool,
    tag: str,
    shards: int | None,
    as_json: bool,
) -> None:
    """Write each RECIPE's manifest and move its <name>/<tag> once every unit of every recipe
    is in the store with all its blobs (after `compile --shard I/N` ran for every I).

    Otherwise list the missing units, each with the shard that owns it, write nothing and exit
    1: re-run those shards, then seal again. Give the same recipes and keyed environment the
    shards had. Reads unit records and lists blobs; never reads a blob.

    \b
    Examples:
      neuronbuild seal a.yaml b.yaml --cache s3://bucket/store --shards 3
    """
    from neuronbuild.seal import seal_plans
    from neuronbuild.store.cas import Store, parse_ref

    recipes = [load_or_exit(path) for path in recipe_paths]
    for recipe in recipes:
        parse_ref(f"{recipe.name}/{tag}")
    store = Store(cache, last_writer_wins=last_writer_wins)
    report = seal_plans([build_plan(r) for r in recipes], store, tag=tag, shards=shards)
    if as_json:
        echo_json("seal", {"store": store.url, **report.to_json()})
    else:
        for m in report.missing:
            owner = f"shard {m.shard}/{shards}" if m.shard is not None else "its shard"
            click.echo(
                f"MISSING {m.recipe} {short(m.key)} ({m.label}): {m.why}; re-run {owner}",
                err=True,
            )
        for sealed in report.sealed:
            click.echo(f"sealed {sealed['manifest']}; {sealed['ref']} -> it in {store.url}")
    if report.missing:
        owners = sorted({m.shard for m in report.missing if m.shard is not None})
        which = f" (shards {', '.join(map(str, owners))} of {shards})" if owners else ""
        raise UnitsFailed(
            f"not sealed: {count(len(report.missing), 'unit')} missing{which}; nothing written"
        )


@cli.command()
@click.argument("target", metavar="REF|MANIFEST")
@CACHE_OPTION
@click.option("--deep", is_flag=True, help="Re-hash every blob, not only check presence and size.")
@json_option()
def verify(target: str, cache: str, deep: bool, as_json: bool) -> None:
    """Check that everything REF|MANIFEST references is in the store (exit 2 if not).

    \b
    Examples:
      neuronbuild verify app/latest --cache s3://bucket/store --deep
    """
    from neuronbuild.store.cas import Store
    from neuronbuild.store.verify import verify_manifest

    store = Store(cache)
    report = verify_manifest(store, store.resolve(target), deep=deep)
    if as_json:
        echo_json("verify", {"store": store.url, **report.to_json()})
    else:
        for problem in report.problems:
            click.echo(problem, err=True)
        state = "ok" if not report.problems else count(len(report.problems), "problem")
        how = "re-hashed" if deep else "present with their sizes"
        click.echo(
            f"{report.manifest}: {count(report.blobs, 'blob')}, {size(report.bytes)} {how}: {state}"
        )
    if report.problems:
        sys.exit(2)


@cli.command()
@click.argument("target", metavar="REF|MANIFEST")
@click.option(
    "--from",
    "source",
    metavar="URL",
    required=True,
    help="The store to copy from (e.g. a CI folder), any URL --cache takes.",
)
@CACHE_OPTION
@LWW_OPTION
@jobs_option("blob transfers", default=8)
@json_option()
def push(
    target: str, source: str, cache: str, last_writer_wins: bool, jobs: int, as_json: bool
) -> None:
    """Publish REF|MANIFEST from the --from store to --cache: blobs it lacks, unit records,
    the manifest, then (for a REF) the same ref, moved by compare-and-swap.

    \b
    Examples:
      neuronbuild push app/latest --from ./ci-store --cache s3://bucket/store
    """
    from neuronbuild.store.cas import Store
    from neuronbuild.store.transfer import copy_manifest

    src, dst = Store(source), Store(cache, last_writer_wins=last_writer_wins, create=True)
    found = src.resolve_target(target)
    report = copy_manifest(src, dst, found.digest, jobs=jobs, progress=sys.stderr, what="push")
    ref = "/".join(found.ref) if found.ref else None
    if found.ref:
        dst.set_ref(*found.ref, report.manifest)
    if as_json:
        echo_json("push", {"from": src.url, "store": dst.url, "ref": ref, **report.to_json()})
    else:
        click.echo(
            f"pushed {report.manifest}{f' ({ref})' if ref else ''} to {dst.url}: "
            f"{count(report.copied, 'blob')} copied ({size(report.bytes)}), "
            f"{report.skipped} already there"
        )


@cli.command()
@click.argument("source", metavar="SRC")
@click.argument("destination", metavar="DST")
@CACHE_OPTION
@LWW_OPTION
@json_option()
def tag(source: str, destination: str, cache: str, last_writer_wins: bool, as_json: bool) -> None:
    """Point ref DST (<name>/<tag>) at what SRC (a ref or sha256:...) points at, by
    compare-and-swap. Promote with `tag app/latest app/prod`; roll back with an older manifest
    from `ls --history`.

    \b
    Examples:
      neuronbuild tag app/latest app/prod --cache s3://bucket/store
      neuronbuild tag sha256:3f2a9c1b... app/prod   (roll back)
    """
    from neuronbuild.store.cas import Store, parse_ref

    store = Store(cache, last_writer_wins=last_writer_wins)
    digest = store.resolve(source)
    store.get_manifest(digest)
    name, ref_tag = parse_ref(destination)
    before = store.get_ref(name, ref_tag)
    store.move_ref(name, ref_tag, digest, before)
    if as_json:
        echo_json(
            "tag",
            {
                "store": store.url,
                "ref": f"{name}/{ref_tag}",
                "previous": before,
                "manifest": digest,
            },
        )
    else:
        click.echo(f"{name}/{ref_tag}: {short(before) if before else '(new)'} -> {digest}")


@cli.command(name="ls")
@CACHE_OPTION
@click.option("--history", is_flag=True, help="Also list every move of every ref.")
@json_option()
def ls_(cache: str, history: bool, as_json: bool) -> None:
    """List the store's refs and count its manifests, unit records, blobs and bytes.

    \b
    Examples:
      neuronbuild ls --cache s3://bucket/store --history
    """
    from neuronbuild.store.cas import Store, parse_ref

    store = Store(cache)
    data = store.overview()
    refs = data["refs"]
    if history:
        data["history"] = {
            ref: [move.to_json() for move in store.ref_history(*parse_ref(ref))] for ref in refs
        }
    if as_json:
        echo_json("ls", data)
        return
    rows = [["REF", "MANIFEST"]] + [[r, short(d)] for r, d in sorted(refs.items())]
    for line in format_table(rows):
        click.echo(line)
    for ref, moves in data.get("history", {}).items():
        click.echo(f"\nhistory of {ref}:")
        rows = [["MOVED", "FROM", "TO"]] + [
            [
                f"{when(move['time'])} ({ago(move['time'])})",
                short(move["previous"]) if move["previous"] else text(None),
                short(move["manifest"]),
            ]
            for move in reversed(moves)
        ]
        for line in format_table(rows, indent="  "):
            click.echo(line)
    click.echo(store_counts(data, store.url))


def store_counts(data: dict[str, Any], url: str) -> str:
    """``ls`` and ``status``'s line of what a store holds (``data``: :meth:`Store.overview`)."""
    return (
        f"{count(data['n_manifests'], 'manifest')}, "
        f"{count(data['n_unit_records'], 'unit record')}, {count(data['n_blobs'], 'blob')} "
        f"({size(data['bytes'])}), {count(data['n_layouts'], 'node layout')} in {url}"
    )


@cli.command()
@CACHE_OPTION
@LWW_OPTION
@dry_run_option("list what would be deleted")
@click.option(
    "--keep-last", type=click.IntRange(0), help="Keep only each ref's last N moves alive."
)
@click.option(
    "--older-than",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Grace period in days: younger objects are never deleted.",
)
@json_option()
def gc(
    cache: str,
    last_writer_wins: bool,
    dry_run: bool,
    keep_last: int | None,
    older_than: float,
    as_json: bool,
) -> None:
    """Delete what no ref or ref history reaches (mark and sweep), never a blob a live manifest
    uses nor anything younger than the grace period.

    \b
    Examples:
      neuronbuild gc --cache s3://bucket/store --keep-last 5 --dry-run
    """
    from neuronbuild.store.cas import Store
    from neuronbuild.store.gc import KIND_NOUNS, collect_garbage

    store = Store(cache, last_writer_wins=last_writer_wins)
    report = collect_garbage(
        store, keep_last=keep_last, older_than_days=older_than, dry_run=dry_run
    )
    if as_json:
        echo_json("gc", {"store": store.url, **report.to_json()})
        return
    verb = "would delete" if dry_run else "deleted"
    counts = (
        ", ".join(
            count(len(p), *KIND_NOUNS.get(kind, (kind,))) for kind, p in report.deleted.items()
        )
        or "nothing"
    )
    click.echo(
        f"{count(report.live_manifests, 'live manifest')}; {verb} {counts} "
        f"({size(report.bytes)} of blobs)"
    )
    for digest in report.restored:
        click.echo(f"kept {digest}: a ref moved to it while gc ran")


@cli.command()
@click.argument("recipe_path", metavar="RECIPE", type=click.Path(dir_okay=False))
@CACHE_OPTION
@json_option()
def doctor(recipe_path: str, cache: str, as_json: bool) -> None:
    """Print every factor of every unit key of RECIPE, whether the store holds it, and for a
    miss which factor differs from the recipe's last sealed build.

    \b
    Examples:
      neuronbuild doctor recipe.yaml --cache s3://bucket/store
    """
    from dataclasses import asdict

    from neuronbuild.doctor import diagnose, differing_factors, summary
    from neuronbuild.store.cas import Store

    recipe = load_or_exit(recipe_path)
    store = Store(cache)
    units = diagnose(recipe, store)
    if as_json:
        echo_json(
            "doctor", {"store": store.url, "name": recipe.name, "units": [asdict(u) for u in units]}
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
            echo(f"HIT  {unit.key} ({labels})", fg="green")
        else:
            echo(f"MISS {unit.key} ({labels})", fg="red", bold=True)
        if unit.differences:  # the answer first: what differs, and why that misses
            echo(f"     differs from {unit.compared_with}:")
            for line in unit.differences:
                echo(f"       {line}", fg="yellow", bold=True)
            echo("     why it misses:")
            for line in unit.explanations:
                echo(f"       {line}")
            echo("     every factor:")
        elif not unit.cached:
            echo("     no sealed build of this graph to compare with; compile it")
        indent = " " * (7 if unit.differences else 5)
        differing = set(differing_factors(unit))
        for name, value in unit.factors.items():
            mark = name in differing or any(d.startswith(f"{name}.") for d in differing)
            factor = f"{indent}{name}: {json.dumps(value, sort_keys=True)}"
            echo(factor, fg="yellow" if mark else None)


@cli.command()
@click.argument("recipe_path", metavar="[RECIPE]", required=False, type=click.Path(dir_okay=False))
@CACHE_OPTION
@json_option()
def status(recipe_path: str | None, cache: str, as_json: bool) -> None:
    """The store's refs and sizes; with RECIPE, how many of its graphs per kind are cached or
    missing, and where <name>/latest points.

    \b
    Examples:
      neuronbuild status
      neuronbuild status recipe.yaml --cache s3://bucket/store
    """
    from neuronbuild.doctor import recipe_status
    from neuronbuild.store.cas import Store

    store = Store(cache)
    data = store.overview()
    if recipe_path is not None:
        data["recipe"] = recipe_status(load_or_exit(recipe_path), store)
    if as_json:
        echo_json("status", data)
        return
    click.echo(f"{count(len(data['refs']), 'ref')}, {store_counts(data, store.url)}")
    if "recipe" in data:
        info = data["recipe"]
        click.echo(f"{info['name']}/latest -> {info['latest'] or '(none)'}")
        rows = [["KIND", "CACHED", "MISSING"]] + [
            [kind, str(n["cached"]), str(n["missing"])]
            for kind, n in info["n_graphs_by_kind"].items()
        ]
        for line in format_table(rows):
            click.echo(line)


@cli.command()
def isa() -> None:
    """Print this host's CPU instruction set, as a recipe's cpu_isa names it.

    \b
    Examples:
      neuronbuild isa
    """
    click.echo(host_isa())


cli.add_command(serve)
cli.add_command(pull)


def main() -> None:
    """Console entry point (``neuronbuild``)."""
    run(cli)
