"""The build commands: ``validate``, ``plan``, ``compile`` and ``seal`` (recipe in, units and
manifests out). The compile side is imported inside each command: ``neuronbuild serve`` loads this
module and must not load the build (DESIGN.md; tests/runtime/test_import_allowlist.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from neuronbuild.cli.common import load_or_exit, warn, warn_removed_env
from neuronbuild.errors import RecipeInvalid, StoreError, UnitsFailed, UserError
from neuronbuild.human import count, duration, format_table
from neuronbuild.node.weights import weights_line
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.ui.console import echo_json
from neuronbuild.ui.env_help import EnvHelpCommand
from neuronbuild.ui.logtail import tail_lines
from neuronbuild.ui.options import (
    cache_option,
    check_ref_move_options,
    dry_run_option,
    index_option,
    jobs_option,
    json_option,
    last_writer_wins_option,
    local_cache_option,
    ref_move_options,
    sign_option,
)
from neuronbuild.ui.verbosity import detail, echo_notes, key_text

if TYPE_CHECKING:
    from neuronbuild.attest.sign import Signed
    from neuronbuild.orchestrate.plan_diff import PlanDiff
    from neuronbuild.orchestrate.report import CompileReport, UnitOutcome
    from neuronbuild.store.cas import Store

DRY_RUN_ACTIONS = {"missing": "compile", "cached": "reuse", "skipped": "skip"}
"""What ``compile --dry-run``'s text says the real run would do with a unit of each JSON
``status``: compile it (``missing``), reuse the store's build (``cached``), or leave it to the
shard that owns it (``skipped``); docs/json.md states the same mapping."""


def check_fits(plan: Plan) -> None:
    """Refuse a plan whose manifest the store's readers would refuse (seal imported lazily)."""
    from neuronbuild.orchestrate.seal import check_manifest_fits

    check_manifest_fits(plan)


def signing(key_ref: str | None, store: Store, signed: list[Signed]) -> Any:
    """``--sign``'s hook for :func:`~neuronbuild.orchestrate.seal.seal_all`: each sealed manifest
    signed with the key KEY_REF names and its :class:`~neuronbuild.attest.sign.Signed` appended
    to ``signed``; None without ``--sign``. The key is loaded now, so a bad one is refused
    before any work.

    Raises:
        UserError: the key cannot be loaded (:func:`neuronbuild.attest.keys.load_signer`).
    """
    if key_ref is None:
        return None
    from neuronbuild import start_env
    from neuronbuild.attest.keys import load_signer
    from neuronbuild.attest.sign import sign_manifest

    signer = load_signer(key_ref)
    environ = start_env.environ()
    return lambda digest: signed.append(sign_manifest(store, digest, signer, environ))


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


@click.command()
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
        check_fits(plan)
        escalated = [w for w in recipe.warnings if w not in recipe.host_warnings]
        if strict and escalated:
            results.append({**invalid(path), "errors": [f"{w} (--strict)" for w in escalated]})
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
            for w in result["warnings"]:  # validate's result: -q keeps them
                click.echo(f"warning: {result['path']}: {w}", err=True)
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
            row = [str(i), graph.kind, dims, key_text(unit.key.digest)]
            if cached is not None:
                row.append("yes" if unit.key.digest in cached else "no")
            rows.append(row)
    return format_table(rows)


@click.command()
@click.argument("recipe_path", metavar="RECIPE", type=click.Path(dir_okay=False))
@json_option()
@click.option("--explain", is_flag=True, help="Print every factor of every unit key.")
@click.option(
    "--diff",
    "old_path",
    metavar="OLD",
    type=click.Path(dir_okay=False),
    help="Also list the graphs RECIPE compiles that recipe OLD does not (a new release, bucket "
    "or flag), why, and their cost from the compile times the store recorded.",
)
@cache_option
def plan(recipe_path: str, as_json: bool, explain: bool, old_path: str | None, cache: str) -> None:
    """List exactly the graphs vLLM will compile for RECIPE, their compile units, and which
    units the store holds.

    \b
    Examples:
      neuronbuild plan recipe.yaml
      neuronbuild plan recipe.yaml --explain --cache s3://bucket/store
      neuronbuild plan next-release.yaml --diff recipe.yaml --cache s3://bucket/store
    """
    from neuronbuild.store.cas import planning_store  # the plan itself never opens a store

    recipe = load_or_exit(recipe_path)
    the_plan = build_plan(recipe)
    check_fits(the_plan)
    given = click.get_current_context().get_parameter_source("cache") != ParameterSource.DEFAULT
    try:
        store = planning_store(cache, given=given)
        keys = [unit.key.digest for unit in the_plan.units]
        cached = None if store is None else set(store.cached_units(keys))
    except StoreError as exc:
        if given:
            raise
        warn(f"{exc}; not saying which units the store holds")
        store, cached = None, None
    diff = None
    if old_path is not None:
        from neuronbuild.orchestrate.plan_diff import diff_plans

        old_plan = build_plan(load_or_exit(old_path))
        diff = diff_plans(the_plan, old_plan, store)
    if as_json:
        extra = {} if diff is None else {"diff": {"against": old_path, **diff.to_json()}}
        echo_json("plan", {"store": cache, **the_plan.to_json(cached), **extra})
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
    if diff is not None and old_path is not None:
        echo_diff(diff, old_path)
    if explain:
        for unit in the_plan.units:
            click.echo(f"\nunit {unit.key.digest} ({unit.label()})")
            for name, value in unit.key.factors.items():
                click.echo(f"  {name}: {json.dumps(value, sort_keys=True)}")


def echo_diff(diff: PlanDiff, old_path: str) -> None:
    """``plan --diff``'s part: each unit that compiles again, why and its cost, then the sum."""
    seeded = sum(c.seeded for c in diff.changed)
    click.echo(
        f"\nagainst {old_path}: {count(diff.graphs, 'graph')} compile "
        f"({count(len(diff.changed), 'unit')}), {seeded} seeded from its build, "
        f"{diff.reused} reused, {diff.dropped} dropped"
    )
    rows = [["UNIT", "KEY", "COMPILES", "TIME", "FROM", "WHY"]] + [
        [
            c.unit.label(),
            key_text(c.unit.key.digest),
            f"{len(c.unit.graphs) - c.seeded} of {len(c.unit.graphs)}",
            duration(c.seconds),
            "recorded" if c.recorded else "estimate",
            ", ".join(c.why) or "new graphs",
        ]
        for c in diff.changed
    ]
    for line in format_table(rows, indent="  ") if diff.changed else []:
        click.echo(line)
    recorded = sum(c.recorded for c in diff.changed)
    click.echo(
        f"cost: {duration(diff.seconds)} of compiling, one unit after another ({recorded} of "
        f"{count(len(diff.changed), 'unit')} from recorded times, the rest estimated); peak "
        f"memory {diff.peak_memory_gib:g} GiB per unit"
    )


def dry_run_rows(report: CompileReport) -> list[list[str]]:
    """``compile --dry-run``'s table for one recipe, header first: per unit what the real run
    would do (:data:`DRY_RUN_ACTIONS`), its label and key (:func:`key_text`)."""
    rows = [["WOULD", "UNIT", "KEY"]]
    for unit in report.units:
        action = DRY_RUN_ACTIONS.get(unit.status, unit.status)
        if unit.shard is not None and unit.status == "skipped":
            action = f"skip (shard {unit.shard})"
        rows.append([action, unit.label, key_text(unit.key)])
    return rows


def echo_unit(unit: UnitOutcome) -> None:
    """``compile``'s line for a unit worth a line: a failure (with its log's last lines under
    ``-v``), or a compile that reused entries of the previous build."""
    if unit.status == "failed":
        click.echo(f"FAILED {unit.label} ({key_text(unit.key)}): {unit.error}", err=True)
        for line in tail_lines(unit.log) if unit.log is not None else []:
            detail(f"  | {line}", err=True)
    elif unit.entries is not None and unit.entries.reused:
        click.echo(
            f"{key_text(unit.key)}: "
            f"{count(unit.entries.compiled, 'entry', 'entries')} compiled, "
            f"{unit.entries.reused} reused from the previous build"
        )


@click.command(name="compile", cls=EnvHelpCommand)
@click.argument(
    "recipe_paths", metavar="RECIPE...", nargs=-1, required=True, type=click.Path(dir_okay=False)
)
@cache_option
@last_writer_wins_option
@local_cache_option("also keep the sealed build there (write-through).")
@jobs_option("units compiled (Ray: units in flight on the cluster)", default=1)
@click.option(
    "--timeout",
    metavar="SECONDS",
    default=3600.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds allowed per unit.",
)
@click.option(
    "--log-dir",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Where per-unit logs go (kept on failure).",
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
    # (this module) must not (DESIGN.md; tests/runtime/test_import_allowlist.py).
    type=click.Choice(("local", "ray")),
    default="local",
    show_default=True,
    help="Where units run: worker processes here, or Ray tasks (pip install 'neuronbuild[ray]').",
)
@click.option(
    "--address",
    metavar="ADDRESS",
    help="With --executor ray: the cluster (ray://HOST:10001, HOST:6379 or auto); default "
    "$RAY_ADDRESS, else a local cluster.",
)
@click.option(
    "--stage",
    metavar="DIR",
    type=click.Path(file_okay=False),
    help="Only read --cache (units it holds are reused, their blobs not fetched); write "
    "everything this build makes (blobs, records, manifest, <name>/latest) to the folder "
    "store DIR, for `neuronbuild push NAME/latest --from DIR` once the build succeeded.",
)
@ref_move_options
@index_option
@sign_option
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
    stage: str | None,
    rollback: bool,
    expect: str | None,
    index: bool,
    sign_key: str | None,
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
    Refuses (exit 2) to move <name>/latest back to a manifest it pointed at before (an old
    recipe compiled again) unless --rollback; --expect makes the move a compare-and-swap.

    \b
    Examples:
      neuronbuild compile recipe.yaml --cache s3://bucket/store -j 4
      neuronbuild compile recipe.yaml --dry-run
      neuronbuild compile a.yaml b.yaml --cache s3://bucket/store --shard auto/3
      neuronbuild compile recipe.yaml --cache s3://bucket/store --stage build/stage
    """
    from neuronbuild.orchestrate.compile import compile_recipes
    from neuronbuild.orchestrate.executor import executor_for
    from neuronbuild.orchestrate.shard import parse_shard
    from neuronbuild.store import moves
    from neuronbuild.store.cas import LATEST, Store
    from neuronbuild.store.tiered import TieredStore
    from neuronbuild.ui.progress import Progress

    shard = parse_shard(shard_text) if shard_text is not None else None
    if shard is not None and local_cache:
        raise UserError("--local-cache: a shard seals nothing to keep there; drop the option")
    check_ref_move_options(0, rollback, expect, sharded=shard is not None)
    if stage is not None and (shard is not None or local_cache):
        given = "--shard" if shard is not None else "--local-cache"
        raise UserError(f"--stage: not with {given}; drop one of them")
    if stage is not None and (expect is not None or rollback):
        given = "--expect" if expect is not None else "--rollback"
        raise UserError(f"{given}: --stage moves no shared ref; give it to push")
    if stage is not None and index:  # the stage's ref is empty: an index of this build alone
        raise UserError(
            "--index: --stage reads no ref of the shared store to add to; push the stage, then "
            "`neuronbuild seal RECIPE --cache URL --index` where the build's units now are"
        )
    runner = executor_for(executor, address)
    recipes = [load_or_exit(path) for path in recipe_paths]
    check_ref_move_options(len({r.name for r in recipes}), rollback, expect)  # a family: one
    for recipe in recipes:
        warn_removed_env(recipe)
    # A missing folder reads as empty and is created by the first write, after every check.
    store = Store(cache, last_writer_wins=last_writer_wins, missing_ok=True)
    shared = None
    if stage is not None:  # read the shared store, write only the stage
        shared, store = store, Store(stage, create=not dry_run, missing_ok=dry_run)
        store.blobs_elsewhere = shared
    ask = moves.Ask(rollback, moves.expected_digest(store, expect))
    if sign_key is not None and shard is not None:
        raise UserError("--sign: a shard seals nothing to sign; give it to seal")
    signed: list[Signed] = []
    on_sealed = signing(sign_key, store, signed)
    local = None
    if local_cache:  # checked before hours of work; a dry run creates nothing
        local = Store(local_cache, create=not dry_run, missing_ok=dry_run)
        local.check_writable(leave_nothing=dry_run, option="--local-cache")
    done = compile_recipes(
        recipes,
        store,
        jobs=jobs,
        timeout=timeout,
        log_dir=Path(log_dir) if log_dir else None,
        dry_run=dry_run,
        shard=shard,
        executor=runner,
        observe=Progress,
        reuse=shared,
        ask=ask,
        on_sealed=None if dry_run else on_sealed,
        index=index,
    )
    if local is not None and not dry_run:
        tiers = TieredStore(local, store)
        for report in done.recipes:
            if report.manifest:
                tiers.write_through(report.index or report.manifest, report.name, LATEST)
        echo_notes(tiers.notes)
    if as_json:
        extra = {"signed": [s.to_json() for s in signed]} if sign_key is not None else {}
        echo_json("compile", {"store": store.url, "dry_run": dry_run, **done.to_json(), **extra})
    else:
        if shard is not None:
            click.echo(
                f"shard {shard}: {done.assigned} of {count(done.units, 'unit')}"
                + ("" if done.assigned else "; no units in this shard, nothing to do")
            )
        for report in done.recipes:
            for unit in report.units:
                echo_unit(unit)
            totals = ", ".join(f"{n} {s}" for s, n in report.by_status().items() if n)
            click.echo(
                f"{report.name}: {count(len(report.units), 'unit')} ({totals}) "
                f"in {duration(report.seconds)}"
            )
            for line in format_table(dry_run_rows(report), indent="  ") if dry_run else []:
                click.echo(line)
            if report.manifest and report.ref:
                click.echo(f"sealed {report.manifest} in {store.url}")
                model = next(r.model for r in recipes if r.name == report.name)
                click.echo(weights_line(model, report.weights))
                for s in (s for s in signed if s.manifest == report.manifest):
                    click.echo(s.line())
                if report.index is not None:
                    click.echo(f"indexed {report.manifest} in {report.index}")
                moved = moves.Moved(report.ref, report.previous, report.index or report.manifest)
                click.echo(moved.line())
            elif report.blocked:
                click.echo(f"{report.name}: compiling here would fail: {report.blocked}", err=True)
        if dry_run:
            click.echo("dry run: nothing compiled")
        elif shard is not None and done.assigned and not done.failed:
            names = " ".join(recipe_paths)
            click.echo(
                f"published; once every shard has run: neuronbuild seal {names} "
                f"--cache {store.url} --shards {shard.count}"
            )
    if done.refused is not None:
        click.echo(f"error: {done.refused}", err=True)
    if done.failed:
        what = "this shard's failed units" if shard else "them"
        raise UnitsFailed(f"not sealed: some units failed; fix {what} and run compile again")
    if any(r.blocked for r in done.recipes):
        sys.exit(2)


@click.command()
@click.argument(
    "recipe_paths", metavar="RECIPE...", nargs=-1, required=True, type=click.Path(dir_okay=False)
)
@cache_option
@last_writer_wins_option
@click.option(
    "--tag",
    metavar="TAG",
    default="latest",
    show_default=True,
    help="The tag each <name>/<tag> ref moves to.",
)
@click.option(
    "--shards",
    metavar="N",
    type=click.IntRange(1),
    help="The N the shards ran with (compile --shard I/N), to name the shard owning each "
    "missing unit.",
)
@ref_move_options
@index_option
@sign_option
@json_option()
def seal(
    recipe_paths: tuple[str, ...],
    cache: str,
    last_writer_wins: bool,
    tag: str,
    shards: int | None,
    rollback: bool,
    expect: str | None,
    index: bool,
    sign_key: str | None,
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
    from neuronbuild.orchestrate.seal import seal_plans
    from neuronbuild.store import moves
    from neuronbuild.store.cas import Store, parse_ref

    recipes = [load_or_exit(path) for path in recipe_paths]
    check_ref_move_options(len({r.name for r in recipes}), rollback, expect)  # a family: one
    for recipe in recipes:
        parse_ref(f"{recipe.name}/{tag}")
    store = Store(cache, last_writer_wins=last_writer_wins)
    ask = moves.Ask(rollback, moves.expected_digest(store, expect))
    plans = [build_plan(r) for r in recipes]
    signed: list[Signed] = []
    on_sealed = signing(sign_key, store, signed)
    report = seal_plans(
        plans, store, tag=tag, shards=shards, ask=ask, on_sealed=on_sealed, index=index
    )
    if as_json:
        extra = {"signed": [s.to_json() for s in signed]} if sign_key is not None else {}
        echo_json("seal", {"store": store.url, **report.to_json(), **extra})
    else:
        for m in report.missing:
            owner = f"shard {m.shard}/{shards}" if m.shard is not None else "its shard"
            click.echo(
                f"MISSING {m.recipe} {key_text(m.key)} ({m.label}): {m.why}; re-run {owner}",
                err=True,
            )
        models = {r.name: r.model for r in recipes}
        for sealed in report.sealed:
            click.echo(f"sealed {sealed['manifest']} in {store.url}")
            click.echo(weights_line(models[sealed["name"]], sealed["weights"]))
            for s in (s for s in signed if s.manifest == sealed["manifest"]):
                click.echo(s.line())
            if sealed["index"] is not None:
                click.echo(f"indexed {sealed['manifest']} in {sealed['index']}")
            target = str(sealed["index"] or sealed["manifest"])
            click.echo(moves.Moved(str(sealed["ref"]), sealed["previous"], target).line())
    if report.missing:
        owners = sorted({m.shard for m in report.missing if m.shard is not None})
        which = f" (shards {', '.join(map(str, owners))} of {shards})" if owners else ""
        raise UnitsFailed(
            f"not sealed: {count(len(report.missing), 'unit')} missing{which}; nothing written"
        )
