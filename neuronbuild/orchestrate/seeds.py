"""Seed entries: the graphs a failed unit finished, kept in the store for the next run to reuse.

vLLM-Neuron compiles a phase graph by graph and checks its own cache before each one, so a phase
that fails at its fifth graph has four complete entries worth hours at TP=32. They are not a
published unit (the unit failed, and its record would claim graphs it lacks), so they are kept
as *seed records*: unit records under a key of their own, drawn from the recipe's name, the
factors seeding matches on (engine, target, toolchain, phase) and the build they extend (the
manifest ``<name>/latest`` names, or none), one per failed run (``generation`` 0, 1, ...: a
record is written once, so each failure adds one). :func:`~.compile.seed_scratch` lays them
into the next run's scratch cache beside the previous build's entries, where the engine's own
per-graph check hits them, so the rerun compiles only what failed. Once the recipe builds, its
``latest`` moves, the next failures start again at generation 0, and ``gc`` sweeps old seed
records like any unit record past its grace period (DESIGN.md, "Store").
"""

from __future__ import annotations

import contextlib
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.graph import CompileUnit
from neuronbuild.human import count
from neuronbuild.keys import UnitKey
from neuronbuild.recipe import Recipe
from neuronbuild.store.cas import LATEST, Store
from neuronbuild.store.records import FileRecord, UnitRecord

if TYPE_CHECKING:
    from neuronbuild.engines.compiler import UnitCompiler

SEED_SCHEMA = "neuronbuild.seed/1"
"""Salt of a seed record's key; bumped when what a seed record holds changes."""

SAME = ("engine", "target", "toolchain", "installed", "phase")
"""Unit factors a seed must share with the unit it seeds (as seeding from ``latest`` does)."""

MAX_GENERATIONS = 64
"""Failed runs kept per recipe phase and build; more are not recorded (the oldest still seed)."""


def seed_key(recipe: Recipe, unit: CompileUnit, base: str | None, generation: int) -> UnitKey:
    """The key of the ``generation``-th seed record of ``unit``'s phase of ``recipe`` on top of
    build ``base`` (a manifest digest, None before the first build)."""
    same = {k: unit.key.factors.get(k) for k in SAME}
    return UnitKey(
        {
            "schema": SEED_SCHEMA,
            "recipe": recipe.name,
            "base": base,
            "same": same,
            "generation": generation,
        }
    )


def seed_records(
    store: Store, recipe: Recipe, unit: CompileUnit, base: str | None
) -> list[UnitRecord]:
    """Every seed record kept for ``unit``'s phase on top of ``base``, oldest first; a record that
    cannot be read is skipped (its graphs compile again)."""
    records = []
    for generation in range(MAX_GENERATIONS):
        try:
            record = store.get_unit(seed_key(recipe, unit, base, generation).digest)
        except StoreDataInvalid:
            continue
        if record is None:
            break
        records.append(record)
    return records


def seed_files(
    store: Store, recipe: Recipe, unit: CompileUnit, base: str | None, cache_dir: Path
) -> dict[str, FileRecord]:
    """The files under the engine's ``cache_dir`` of :func:`seed_records`, by path."""
    return {
        f.path: f
        for record in seed_records(store, recipe, unit, base)
        for f in record.files
        if Path(f.path).is_relative_to(cache_dir)
    }


def finished_files(compiler: UnitCompiler, cache_root: Path, seeded: set[str]) -> list[Path]:
    """The files of the complete entries a failed run left in its scratch ``cache_root`` that it
    was not seeded with (with the engine's shared folders, e.g. NKI caches, when any entry is
    new); none when the engine finds nothing to harvest."""
    try:
        files = compiler.harvest(cache_root)
    except (RuntimeError, OSError):
        return []
    names = {rel: rel.relative_to(compiler.cache_dir).parts[0] for rel in files}
    if not set(names.values()) - seeded - compiler.shared_dirs:
        return []
    return [
        rel for rel, name in names.items() if name not in seeded or name in compiler.shared_dirs
    ]


def keep_finished(
    store: Store,
    recipe: Recipe,
    unit: CompileUnit,
    compiler: UnitCompiler,
    cache_root: Path,
    seeded: set[str],
    stream: TextIO | None = None,
) -> int:
    """After ``unit`` failed: publish what its run finished (:func:`finished_files`) as the next
    free seed record, and say so on ``stream``. Returns the files kept; never raises for the
    store (a failure to keep is a note: the unit's own failure is what the run reports)."""
    from neuronbuild.engines.registry import engine_for
    from neuronbuild.orchestrate.compile import ingest  # compile imports this module

    files = finished_files(compiler, cache_root, seeded) if compiler.seeds_from_previous else []
    if not files:
        return 0
    try:
        base = store.get_ref(recipe.name, LATEST)
        generation = len(seed_records(store, recipe, unit, base))
        if generation >= MAX_GENERATIONS:
            return 0
        seed = CompileUnit(unit.graphs, seed_key(recipe, unit, base, generation))
        ingest(store, seed, cache_root, files, {}, engine_for(recipe))
    except (StoreError, StoreDataInvalid, OSError, RuntimeError) as exc:  # RuntimeError: empty
        print(
            f"neuronbuild: {unit.label()}: finished entries not kept ({exc})",
            file=stream or sys.stderr,
        )
        return 0
    print(
        f"neuronbuild: {unit.label()}: kept {count(len(files), 'file')} of its finished entries "
        "for the next run to reuse",
        file=stream or sys.stderr,
    )
    return len(files)


def count_seed_records(store: Store, workers: int = 16) -> int:
    """How many of the store's unit records are seed records (``status`` and ``ls`` count them
    apart from published units). A unit record a manifest names is a build's, never a seed:
    the manifests are read, then only the records none of them names, ``workers`` at a time (a
    few, where builds are sealed). A manifest or record that cannot be read counts for nothing
    (``verify`` and ``doctor`` report it).

    Raises:
        StoreError: the store failed while listing."""
    named: set[str] = set()
    for digest in store.manifest_digests():
        with contextlib.suppress(StoreDataInvalid, UserError):
            named.update(unit.key for unit in store.get_manifest(digest).units)

    def is_seed(key: str) -> bool:
        try:
            record = store.get_unit(key)
        except (StoreDataInvalid, StoreError):
            return False
        return record is not None and record.factors.get("schema") == SEED_SCHEMA

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(pool.map(is_seed, [k for k in store.unit_keys() if k not in named]))
