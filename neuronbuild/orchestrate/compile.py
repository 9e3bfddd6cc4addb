"""``neuronbuild compile``: plan, skip what the store holds, compile the rest, ingest, seal, move
``<name>/latest``; several recipes in one run, and one shard of a run split over machines.

A unit is published (blobs, then its unit record) as soon as it compiles; the manifest is sealed
and the ref moved only when every unit of the plan is in the store, so a reader never finds a
manifest or ref that points at missing data, whatever happens to this process.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from neuronbuild import envs
from neuronbuild.engines.base import Engine
from neuronbuild.engines.compiler import UnitCompiler, error_line, is_error
from neuronbuild.engines.registry import engine_for, machine_labels
from neuronbuild.engines.versions import pin_matches
from neuronbuild.errors import (
    RefMovesBack,
    RefNotExpected,
    StoreDataInvalid,
    StoreError,
    UserError,
)
from neuronbuild.folders import FolderInTheWay, check_writable_folder
from neuronbuild.graph import CompileUnit
from neuronbuild.human import format_table
from neuronbuild.model_files import check_model_present
from neuronbuild.node.weights import weights_summary
from neuronbuild.notices import retrying
from neuronbuild.orchestrate.costs import PlannedUnit, record_timings
from neuronbuild.orchestrate.events import CANCELLED, ObserverFactory, silent
from neuronbuild.orchestrate.executor import Executor, LocalExecutor, Work
from neuronbuild.orchestrate.family import check_families
from neuronbuild.orchestrate.report import (
    CompileReport,
    EntryCounts,
    RunReport,
    UnitFailure,
    UnitOutcome,
)
from neuronbuild.orchestrate.scheduler import ProcessGroups, UnitFailed, UnitResult
from neuronbuild.orchestrate.seal import check_manifest_fits, seal_all
from neuronbuild.orchestrate.seeds import SAME, keep_finished, seed_files
from neuronbuild.orchestrate.shard import Shard, assign_units
from neuronbuild.orchestrate.sharing import Sharing
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import Recipe
from neuronbuild.store.cas import LATEST, Store
from neuronbuild.store.leases import Leases, LeaseTimes
from neuronbuild.store.moves import ASK_NOTHING, Ask, precheck
from neuronbuild.store.records import FileRecord, UnitRecord

RETRY_BACKOFF_SECONDS = 30.0
"""Pause before the one retry of a transient engine failure (e.g. neuronx-cc's exit 70)."""

MAX_MEMORY_RETRIES = 2
"""Runs of a unit killed for memory that are retried, each with less parallelism."""


class ToolchainMismatch(UserError):
    """Installed versions differ from the recipe's ``toolchain`` pins; the message is a table."""


def check_toolchain(recipe: Recipe, compiler: UnitCompiler) -> dict[str, str]:
    """The installed versions of the recipe's pinned distributions (labels included), each
    matching its pin (:func:`~neuronbuild.engines.versions.pin_matches`: on the public version
    unless the pin carries a local label).

    Raises:
        ToolchainMismatch: with a table of every distribution whose version differs.
    """
    installed = compiler.installed_versions(sorted(recipe.toolchain))
    pins = recipe.toolchain
    differ = [(d, pins[d], v) for d, v in installed.items() if not pin_matches(pins[d], v)]
    if differ:
        rows = [["DISTRIBUTION", "PINNED", "INSTALLED"]] + [
            [d, pin, v or "(not installed)"] for d, pin, v in differ
        ]
        table = "\n".join(format_table(rows, indent="  "))
        raise ToolchainMismatch(
            f"installed versions differ from the toolchain pins of {recipe.source}:\n{table}\n"
            f"{engine_for(recipe).toolchain_fix(recipe.toolchain)}, or update the recipe's "
            "toolchain"
        )
    return {d: str(v) for d, v in installed.items()}


def cached_records(store: Store, plan: Plan) -> dict[str, UnitRecord]:
    """The records of the plan's units the store has cached, by key; compile compiles the
    others, an unreadable record's unit included, and one holding an empty artifact
    (:meth:`~neuronbuild.store.cas.Store.cached_units` repairing, with the engine's
    :meth:`~neuronbuild.engines.base.Engine.sound`)."""
    keys = (u.key.digest for u in plan.units)
    return store.cached_units(keys, repairing=True, sound=plan.engine.sound)


def ingest(
    store: Store,
    unit: CompileUnit,
    cache_root: Path,
    files: list[Path],
    toolchain: dict[str, str],
    engine: Engine | None = None,
) -> UnitRecord:
    """Publish a compiled unit: the blobs the store lacks (batched presence check, parallel
    uploads), then its unit record (the first record for a key wins, unless it holds an empty
    artifact; the stored one is returned). ``engine``: whose content rule the files must pass
    (None: tests' hand-made records).

    Raises:
        RuntimeError: a file the entry's content is in is empty (``engine``'s
            :meth:`~neuronbuild.engines.base.Engine.hollow`: vLLM's save failed after
            compiling); nothing of the unit is published.
    """
    paths = [cache_root / rel for rel in files]
    sizes = ((rel.as_posix(), path.stat().st_size) for rel, path in zip(files, paths, strict=True))
    empty = engine.hollow(sizes) if engine is not None else []
    if empty:
        raise RuntimeError(
            f"the engine left {empty[0]} empty (its save failed after compiling, "
            "vllm-project/vllm#35061); nothing of this unit was published"
        )
    records = [
        FileRecord(rel.as_posix(), digest, size, bool(path.stat().st_mode & 0o111))
        for rel, path, (digest, size) in zip(files, paths, store.put_files(paths), strict=True)
    ]
    record = UnitRecord(
        key=unit.key.digest,
        factors=dict(unit.key.factors),
        graphs=unit.graphs,
        files=tuple(records),
        toolchain=toolchain,
    )
    return store.put_unit(record, engine.sound if engine is not None else None)


def seed_scratch(
    store: Store,
    recipe: Recipe,
    unit: CompileUnit,
    compiler: UnitCompiler,
    cache_root: Path,
    stream: TextIO | None = None,
) -> set[str]:
    """Lay the previous build's entries for this unit into its scratch ``cache_root``, so the
    engine's own per-graph cache check skips every graph that did not change.

    The previous build is the manifest ``<name>/latest`` points at; its unit records for the same
    engine, target, toolchain, installed builds and phase are used, only their files under the
    engine's ``cache_dir``, and those of the seed records failed runs kept on top of it
    (:mod:`.seeds`). An entry whose graph changed has another key (the platform's key covers the
    graph, compiler and versions), so it is never hit, only carried. Returns the names of the
    seeded entries. A previous build that cannot be read seeds nothing (the unit compiles in
    full); an entry with an unreadable or tampered blob is skipped with a warning on ``stream``
    (the unit compiles its graph).
    """
    if not compiler.seeds_from_previous:
        return set()
    try:
        digest = store.get_ref(recipe.name, LATEST)
        if digest is not None:  # an index: its build for this recipe's target and release
            digest = store.build_for(digest, machine_labels(unit.key.factors))
        manifest = store.get_manifest(digest) if digest is not None else None
    except StoreDataInvalid:
        return set()
    # An entry of another build of a distribution (a patched plugin or kernel with the same
    # version) would be hit by the platform's own key, which ignores the source: never seed it.
    files = {
        f.path: f
        for record in (manifest.units if manifest is not None else ())
        if all(record.factors.get(k) == unit.key.factors.get(k) for k in SAME)
        for f in record.files
        if Path(f.path).is_relative_to(compiler.cache_dir)
    }
    files.update(seed_files(store, recipe, unit, digest, compiler.cache_dir))
    bad: set[str] = set()
    for path, entry in files.items():
        name = entry_name(compiler, Path(path))
        if name in bad:
            continue
        try:
            store.fetch_blob(entry, cache_root / path)
            # A hit is told by the .cache_accessed vLLM-Neuron writes (contract section 3).
            (cache_root / compiler.cache_dir / name / ".cache_accessed").unlink(missing_ok=True)
        except StoreDataInvalid as exc:
            # Unreadable previous build data seeds nothing: the unit compiles this graph.
            print(f"neuronbuild: not reusing {name}: {exc}", file=stream or sys.stderr)
            bad.add(name)
            shutil.rmtree(cache_root / compiler.cache_dir / name, ignore_errors=True)
    return {entry_name(compiler, Path(p)) for p in files} - bad


def unit_log(log_dir: Path, unit: CompileUnit) -> Path:
    """The file a unit's engine output is appended to (kept on failure, removed on success)."""
    return log_dir / f"{unit.key.hex}.log"


def entry_name(compiler: UnitCompiler, rel: Path) -> str:
    """The entry (a folder under the engine's ``cache_dir``) a cache file belongs to."""
    return rel.relative_to(compiler.cache_dir).parts[0]


def run_unit(
    groups: ProcessGroups,
    compiler: UnitCompiler,
    recipe: Recipe,
    unit: CompileUnit,
    cache_root: Path,
    log: Path,
    timeout: float | None,
) -> None:
    """Run ``unit``'s engine until it succeeds, retrying what its engine calls retryable: a
    transient failure once after :data:`RETRY_BACKOFF_SECONDS`, a run killed for memory up to
    :data:`MAX_MEMORY_RETRIES` times with less parallelism. Every run appends to ``log``.

    Raises:
        UnitFailed: the engine failed for good; the message names the phase, the failing bucket
            and error code where the log names them; ``failure`` holds them and the log.
    """
    backoffs = pressure = 0
    while True:
        command = compiler.command(recipe, unit, cache_root, pressure=pressure, timeout=timeout)
        start = log.stat().st_size if log.exists() else 0
        code = groups.run(command.argv, env=command.env, cwd=command.cwd, log=log, timeout=timeout)
        if code == 0:
            return
        with open(log, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        failure = compiler.classify(code, text)
        if failure.retry == "backoff" and backoffs < 1:
            backoffs += 1
            wait = RETRY_BACKOFF_SECONDS
            retrying(backoffs + 1, 2, wait, f"{unit.label()}: {failure.reason}")
        elif failure.retry == "fewer_workers" and pressure < MAX_MEMORY_RETRIES:
            pressure += 1
            wait = 0.0
            attempts = MAX_MEMORY_RETRIES + 1
            retrying(pressure + 1, attempts, wait, f"{unit.label()}: {failure.reason}")
        else:
            said = error_line(text)
            found = UnitFailure(
                unit.phase, str(log), failure.bucket, failure.code, failure.reason, said
            )
            where = f"{unit.phase} phase" if unit.phase else "unit"
            bucket = f" at {failure.bucket}" if failure.bucket else ""
            quote = f": {said}" if said and said not in failure.reason and is_error(said) else ""
            raise UnitFailed(f"{where} failed{bucket}: {failure.reason}{quote}", found)
        with open(log, "a") as f:
            f.write(f"\nneuronbuild: {failure.reason}; running the unit again\n")
        if groups.cancelled.wait(wait):
            raise UnitFailed(CANCELLED)


def check_log_dir(log_dir: Path) -> None:
    """Raise UserError, naming ``--log-dir``, unless ``log_dir`` can be written or created
    (probed, nothing left behind): a unit's log is its only trace when it fails."""
    fix = "pass --log-dir with a folder this user can write"
    try:
        check_writable_folder(log_dir)
    except FolderInTheWay as exc:
        raise UserError(f"--log-dir {log_dir}: {exc}; {fix}") from None
    except OSError as exc:
        raise UserError(
            f"--log-dir {log_dir}: cannot write in {exc.filename} ({exc.strerror}); {fix}"
        ) from None


@dataclass
class RecipeRun:
    """One recipe's part of a compile run: its plan, report, the records the store holds for
    it, and ``work``, which compiles and publishes one of its units (None when compiling here
    is blocked, in a dry run)."""

    recipe: Recipe
    plan: Plan
    report: CompileReport
    records: dict[str, UnitRecord]
    work: Work | None
    compiler: UnitCompiler | None = None


def prepare_recipe(
    recipe: Recipe,
    store: Store,
    *,
    log_dir: Path,
    timeout: float | None,
    dry_run: bool,
    outages: list[StoreError | StoreDataInvalid],
    sharded: bool = False,
    stream: TextIO | None = None,
) -> RecipeRun:
    """Plan ``recipe``, check this host can compile it, read what the store holds, and build the
    function that compiles and publishes one of its units (store failures are collected in
    ``outages``).

    Raises:
        UserError: broken install, toolchain or host mismatch, model not on this host, log
            folder not writable (only reported in a dry run).
    """
    plan: Plan = build_plan(recipe)
    check_manifest_fits(plan)  # before hours of compiling end in a refused seal
    report = CompileReport(recipe.name, sharded=sharded)
    try:
        compiler = plan.engine.compiler()
        compiler.check_install()
        toolchain = check_toolchain(recipe, compiler)
        compiler.check_host(recipe)
        check_model_present(recipe.model, recipe.engine_args.get("revision"), recipe.workdir)
        check_log_dir(log_dir)
    except UserError as exc:
        if not dry_run:
            raise
        report.blocked = str(exc)
        return RecipeRun(recipe, plan, report, cached_records(store, plan), None)

    def work(unit: CompileUnit, groups: ProcessGroups) -> tuple[UnitRecord, EntryCounts]:
        log = unit_log(log_dir, unit)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.unlink(missing_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix="neuronbuild-unit-"))
        cache_root = scratch / "vllm-cache"
        seeded: set[str] = set()
        try:
            seeded = seed_scratch(store, recipe, unit, compiler, cache_root, stream)
            run_unit(groups, compiler, recipe, unit, cache_root, log, timeout)
            compiler.settle_seeded(cache_root, unit, seeded)
            files = compiler.harvest(cache_root)
            carried = files + compiler.start_files(cache_root)
            record = ingest(store, unit, cache_root, carried, toolchain, plan.engine)
        except (StoreError, StoreDataInvalid) as exc:
            outages.append(exc)
            raise
        except UnitFailed as exc:
            keep_finished(store, recipe, unit, compiler, cache_root, seeded, stream)
            found = replace(exc.failure or UnitFailure(), phase=unit.phase, log=str(log))
            raise UnitFailed(f"{exc}; log: {log}", found) from None
        except Exception as exc:
            keep_finished(store, recipe, unit, compiler, cache_root, seeded, stream)
            raise UnitFailed(f"{exc}; log: {log}") from None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        log.unlink(missing_ok=True)
        entries = {entry_name(compiler, f) for f in files} - compiler.shared_dirs
        return record, EntryCounts(compiled=len(entries - seeded), reused=len(entries & seeded))

    return RecipeRun(recipe, plan, report, cached_records(store, plan), work, compiler)


def compile_recipes(
    recipes: Sequence[Recipe],
    store: Store,
    *,
    jobs: int = 1,
    timeout: float | None = None,
    log_dir: Path | None = None,
    stream: TextIO | None = None,
    dry_run: bool = False,
    shard: Shard | None = None,
    executor: Executor | None = None,
    observe: ObserverFactory = silent,
    reuse: Store | None = None,
    lease_times: LeaseTimes | None = None,
    ask: Ask = ASK_NOTHING,
    on_sealed: Callable[[str], None] | None = None,
    index: bool = False,
) -> RunReport:
    """Compile every unit of ``recipes`` the store lacks, scheduled together (a unit two recipes
    share is compiled once), publish each, then seal one manifest per recipe and move its
    ``<name>/latest``.

    With ``shard``, only the units :func:`.shard.assign_units` gives that shard are compiled
    and published, and nothing is sealed (``neuronbuild seal`` does, once every shard
    has run). ``timeout`` is per unit, in seconds. Logs go to ``log_dir/<unit key hex>.log``
    (default: each recipe's own log folder), removed on success and kept on failure.
    ``dry_run`` runs every check (the checks of a real run, the store's and the log folder's
    writability included) and reports which units would compile (status ``missing``), writing
    nothing. ``executor``: where units run (default: worker threads here). ``observe`` makes the
    observer told of each unit's start and end and of the run's notes (default: none; the
    command line passes the ``ui`` wing's ``Progress``); ``stream`` is where a
    previous build's unreadable entry is reported (default stderr). ``ask``: what the user
    asked of each ref move (``--rollback``, ``--expect``: :mod:`neuronbuild.store.moves`); an
    ``--expect`` the ref does not meet is refused before anything compiles. ``on_sealed``:
    called with each sealed manifest's digest before its ref moves (``--sign``:
    :func:`~.seal.seal_all`). Recipes of one name are a family sealed as one index, and
    ``index`` (``--index``) seals each recipe into the index its ref names
    (:func:`~.seal.seal_all`).

    Another builder's units are shared, not compiled twice (:mod:`.sharing`): each unit is
    leased in ``store`` just before it starts; a unit another live builder holds is left while
    the others run, then waited for and adopted (status ``adopted``) once its record appears, or
    compiled here once its lease is gone or expired. ``lease_times``: expiry, renewal and poll
    periods (default :class:`~neuronbuild.store.leases.LeaseTimes`). A dry run takes no lease,
    and neither does a run with ``reuse`` (``compile --stage``): the shared store is only read
    there, and a stage is one job's own.

    Raises:
        UserError: broken install, toolchain or host mismatch (before anything runs), or two
            recipes with one name.
        StoreError: the store failed while publishing (a unit's outage is not its failure),
            or, in a dry run, cannot be written.
        EnvInvalid: ``$NEURONBUILD_HEARTBEAT_SECONDS`` is not a positive number (in a dry run
            too).
        Interrupted: SIGINT/SIGTERM; engine processes were ended and nothing was sealed.
        RefMovesBack, RefNotExpected: a ref would move back, or does not hold what ``--expect``
            says (units are published, manifests written, no ref moved); when units of another
            recipe failed too, the report's ``refused`` holds it instead.
    """
    start = time.monotonic()
    # A store outage (exit 3) or bad store data (exit 2) is the store's failure, not the unit's:
    # raised as itself once the other units are done.
    outages: list[StoreError | StoreDataInvalid] = []
    folders = [log_dir or envs.default_log_dir(recipe.name) for recipe in recipes]
    runs = [
        prepare_recipe(
            recipe,
            store,
            log_dir=folder,
            timeout=timeout,
            dry_run=dry_run,
            outages=outages,
            sharded=shard is not None,
            stream=stream,
        )
        for recipe, folder in zip(recipes, folders, strict=True)
    ]
    check_families([run.plan for run in runs])
    if ask.expects and shard is None:  # refused now rather than after hours of compiling
        for run in runs:
            precheck(store, run.recipe.name, LATEST, None, ask)
    if reuse is not None:
        for run in runs:
            lacking = [u.key.digest for u in run.plan.units if u.key.digest not in run.records]
            sound = run.plan.engine.sound
            for key, record in reuse.cached_units(lacking, repairing=True, sound=sound).items():
                run.records[key] = record if dry_run else store.put_unit(record, sound)
    union: dict[str, PlannedUnit] = {}
    works: dict[str, Work] = {}
    logs: dict[str, Path] = {}  # where the heartbeats read each unit's last compiler line
    for run, folder in zip(runs, folders, strict=True):
        for unit in run.plan.units:
            union.setdefault(unit.key.digest, PlannedUnit(unit, run.plan.engine))
            if run.work is not None:
                works.setdefault(unit.key.digest, run.work)
                logs.setdefault(unit.key.digest, unit_log(folder, unit))
    owner = assign_units(list(union.values()), store, shard.count) if shard else {}
    mine = {k for k in union if shard is None or owner[k] == shard.index}
    cached = {k for run in runs for k in run.records}
    todo = [union[k].unit for k in union if k in mine and k not in cached]
    result = RunReport([run.report for run in runs], shard, len(union), len(mine))

    def outcome(unit: CompileUnit, status: str, **ran: Any) -> UnitOutcome:
        return UnitOutcome(unit, status, owner.get(unit.key.digest), **ran)

    if dry_run:
        envs.HEARTBEAT_SECONDS.get()  # the real run's progress reads it; a bad value fails there
        store.check_writable(leave_nothing=True)
        for run in runs:
            for unit in run.plan.units:
                key = unit.key.digest
                status = "cached" if key in cached else "missing" if key in mine else "skipped"
                run.report.units.append(outcome(unit, status))
            run.report.seconds = time.monotonic() - start
        result.seconds = time.monotonic() - start
        return result
    if todo:
        store.check_writable()

    def work(unit: CompileUnit, groups: ProcessGroups) -> Any:
        return works[unit.key.digest](unit, groups)

    estimates = {k: planned.estimate for k, planned in union.items()}
    observer = observe(len(todo))
    adopted: dict[str, UnitRecord] = {}
    results: list[UnitResult] = []
    try:
        at_once = jobs
        for run in runs:  # each engine may lower parallelism for its units (e.g. host memory)
            count = sum(1 for u in todo if u.key.digest in {v.key.digest for v in run.plan.units})
            if run.compiler is not None and count:
                allowed, note = run.compiler.concurrency(run.recipe, count, jobs)
                at_once = min(at_once, allowed)
                if note:
                    observer.note(note)
        runner = executor or LocalExecutor()
        sharing = None
        if todo and reuse is None:
            sharing = Sharing(store, Leases(store, lease_times), observer, outages)
        pending = todo
        # One cluster connection for every round of claiming and waiting (Ray), none for nothing.
        with runner.session() if pending else contextlib.nullcontext():
            while pending and not outages:
                claim = sharing.claim if sharing is not None else None
                ran = runner.run(pending, work, at_once, observer, estimates, logs, claim)
                results += [r for r in ran if not r.held]
                held = [r.unit for r in ran if r.held]
                if sharing is None or not held:
                    break
                found, pending = sharing.wait_for(held)
                adopted.update(found)
    finally:
        observer.close()
    if outages:
        raise outages[0]
    record_timings(store, [(r.unit, r.seconds) for r in results if r.ok])
    by_key = {r.unit.key.digest: r for r in results}
    for run in runs:
        report = run.report
        for unit in run.plan.units:
            key = unit.key.digest
            done = by_key.get(key)
            if key in adopted:
                report.units.append(outcome(unit, "adopted"))
                run.records[key] = adopted[key]
            elif done is None:
                report.units.append(outcome(unit, "cached" if key in cached else "skipped"))
            elif done.ok:
                record, entries = done.value
                report.units.append(
                    outcome(unit, "compiled", seconds=done.seconds, entries=entries)
                )
                run.records[key] = record
            else:
                report.units.append(
                    outcome(
                        unit, "failed", seconds=done.seconds, error=done.error, failure=done.failure
                    )
                )
        report.seconds = time.monotonic() - start
    # A family seals together or not at all: a failed build of one name seals none of it, so a
    # ref never moves onto an index lacking a build it had (or onto one build of several).
    failed = {run.recipe.name for run in runs if run.report.failed}
    sealing = [run for run in runs if shard is None and run.recipe.name not in failed]
    try:
        sealed = seal_all(
            [(run.plan, run.records) for run in sealing],
            store,
            LATEST,
            ask,
            on_sealed,
            index=index,
        )
    except (RefMovesBack, RefNotExpected) as exc:
        if not result.failed:
            raise
        result.refused, sealing, sealed = exc, [], []  # reported beside the failed units
    for run, one in zip(sealing, sealed, strict=True):
        run.report.manifest, run.report.ref = one.manifest, one.moved.ref
        run.report.previous, run.report.index = one.moved.previous, one.index
        run.report.weights = weights_summary(one.weights)
        run.report.seconds = time.monotonic() - start
    result.seconds = time.monotonic() - start
    return result


def compile_recipe(
    recipe: Recipe,
    store: Store,
    *,
    jobs: int = 1,
    timeout: float | None = None,
    log_dir: Path,
    stream: TextIO | None = None,
    dry_run: bool = False,
    observe: ObserverFactory = silent,
) -> CompileReport:
    """:func:`compile_recipes` for one recipe, on local workers, unsharded: its report."""
    run = compile_recipes(
        [recipe],
        store,
        jobs=jobs,
        timeout=timeout,
        log_dir=log_dir,
        stream=stream,
        dry_run=dry_run,
        observe=observe,
    )
    return run.recipes[0]
