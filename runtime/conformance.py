"""The conformance kit: gather what a real compile host or Neuron node shows about a recipe's
latest build and judge it with :mod:`neuronbuild.engines.neuron_conformance` (issue 18 item 10).

On a compile host it reads the store's manifest (a few small files of each entry, fetched
verified) and this host's installed versions; on a node it also lays the manifest out, takes one
entry away and starts vLLM as ``serve`` would, for at most ``timeout`` seconds.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path, PurePosixPath
from typing import Literal

from neuronbuild.engines.neuron import NEURON_OPTIMIZATION_LEVEL
from neuronbuild.engines.neuron_conformance import (
    Check,
    StartOutcome,
    check_layout,
    check_nki_paths,
    check_optimization_level,
    check_removed_entry,
    check_versions,
    skipped,
)
from neuronbuild.engines.neuron_coverage import complete_entries
from neuronbuild.engines.neuron_nki import CARRIED, COMPILE_CACHE, intermediate_root, kernel_refs
from neuronbuild.engines.versions import installed_version
from neuronbuild.errors import UserError
from neuronbuild.recipe import Recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, Manifest
from neuronbuild.store.tiered import TieredStore

from .serve import ServeSource, prepare

Host = Literal["compile", "node"]

READ = ("graph.hlo", "command.txt")
"""The small files of each entry the kit reads (with its ``.artifact_metadata_v*.json``)."""

KV_WHY = (
    "not automated yet: compare the KV block count vLLM logs at compile with the one it logs on "
    "the device (they must be equal for any graph to hit)"
)


def latest_manifest(recipe: Recipe, store: Store) -> tuple[str, Manifest]:
    """The digest and manifest of ``recipe``'s ``<name>/latest``.

    Raises:
        UserError: nothing was compiled for the recipe in ``store``.
    """
    digest = store.get_ref(recipe.name, "latest")
    if digest is None:
        raise UserError(
            f"{store.url} holds no {recipe.name}/latest; run `neuronbuild compile "
            f"{recipe.source} --cache {store.url}` first"
        )
    return digest, store.get_manifest(digest)


def fetch_small_files(store: Store, files: list[FileRecord], dest: Path) -> dict[str, Path]:
    """Fetch (verified) each entry's :data:`READ` files and metadata into ``dest``; returns
    manifest path -> local file."""
    wanted = [
        f
        for f in files
        if PurePosixPath(f.path).name in READ
        or PurePosixPath(f.path).name.startswith(".artifact_metadata")
    ]
    out = {}
    for file in wanted:
        local = dest / file.path
        store.fetch_blob(file, local)
        out[file.path] = local
    return out


def manifest_checks(recipe: Recipe, store: Store, manifest: Manifest, work: Path) -> list[Check]:
    """Rows B2, B10 and B7, judged from the manifest's own files."""
    import json

    prefix = COMPILE_CACHE.as_posix()
    paths = [f.path for f in manifest.files()]
    local = fetch_small_files(store, manifest.files(), work)
    by_entry: dict[str, dict[str, Path]] = {}
    for path, file in local.items():
        parts = PurePosixPath(path).relative_to(prefix).parts
        if len(parts) == 2:
            by_entry.setdefault(parts[0], {})[parts[1]] = file
    keys: dict[str, str] = {}
    for entry, files in by_entry.items():
        for name, file in files.items():
            if name.startswith(".artifact_metadata"):
                data = json.loads(file.read_text())
                keys[entry] = str(data.get("cache_key")) if isinstance(data, dict) else ""
    commands = {e: f["command.txt"].read_text() for e, f in by_entry.items() if "command.txt" in f}
    level = int(recipe.engine_args.get("optimization_level", NEURON_OPTIMIZATION_LEVEL))
    root = intermediate_root()
    refs = {e: kernel_refs(f["graph.hlo"], root) for e, f in by_entry.items() if "graph.hlo" in f}
    carried_prefix = PurePosixPath(prefix, CARRIED)
    carried = {
        PurePosixPath(p).relative_to(carried_prefix).as_posix()
        for p in paths
        if PurePosixPath(p).is_relative_to(carried_prefix)
    }
    return [
        check_layout(paths, prefix, keys),
        check_optimization_level(level, commands),
        check_nki_paths(refs, carried, str(root)),
    ]


def start_without_one_entry(
    recipe: Recipe, store: Store, manifest: Manifest, work: Path, timeout: float
) -> StartOutcome:
    """Lay the manifest out under ``work`` as serve does, remove its first complete entry and
    start vLLM with serve's argv and environment; a start still running after ``timeout``
    seconds is stopped and reported as such (None exit).

    Raises:
        UserError: serve refuses this node before vLLM starts (the refusal says why).
    """
    root = work / "serve-cache"
    prepared = prepare(ServeSource(recipe=recipe.source), TieredStore(store), cache_root=root)
    removed = sorted(complete_entries(f.path for f in manifest.files()))[0]
    entry = root / COMPILE_CACHE / removed
    for file in sorted(entry.rglob("*"), reverse=True):
        file.unlink() if file.is_file() or file.is_symlink() else file.rmdir()
    entry.rmdir()
    start = time.monotonic()
    try:
        run = subprocess.run(
            prepared.argv,
            env=prepared.env,
            cwd=prepared.cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        output = (
            (exc.stdout or b"").decode(errors="replace")
            if isinstance(exc.stdout, bytes)
            else exc.stdout or ""
        )
        return StartOutcome(None, output, time.monotonic() - start, removed)
    return StartOutcome(run.returncode, run.stdout + run.stderr, time.monotonic() - start, removed)


def run_kit(recipe: Recipe, cache: str, host: Host, timeout: float) -> tuple[str, list[Check]]:
    """The manifest digest of ``recipe``'s latest build in store ``cache`` and every check of the
    kit on it, on a ``compile`` host or a Neuron ``node``, in a fixed order (B12, B2, B10, B7,
    C1, B15); ``timeout``: seconds the C1 start may run.

    Raises:
        UserError: the recipe is invalid or not a neuron recipe, or nothing was compiled for
            it in the store.
    """
    if recipe.engine != "neuron":
        raise UserError(
            f"{recipe.source}: engine is {recipe.engine}; the conformance kit checks neuron "
            "recipes (target trn1, trn2, trn3 or inf2)"
        )
    store = Store(cache)
    digest, manifest = latest_manifest(recipe, store)
    checks = [check_versions(recipe.toolchain, {d: installed_version(d) for d in recipe.toolchain})]
    with tempfile.TemporaryDirectory(prefix="neuronbuild-kit-") as tmp:
        checks += manifest_checks(recipe, store, manifest, Path(tmp) / "files")
        if host == "node":
            try:
                outcome = start_without_one_entry(recipe, store, manifest, Path(tmp), timeout)
                checks.append(check_removed_entry(outcome))
            except UserError as exc:
                what = "serve with one entry removed fails at start instead of compiling"
                checks.append(Check("C1", what, "FAIL", f"serve refused this node: {exc}"))
        else:
            checks.append(
                skipped(
                    "C1",
                    "serve with one entry removed fails at start instead of compiling",
                    "needs a Neuron node: run the kit there with --host node",
                )
            )
    checks.append(skipped("B15", "KV block count at compile equals the device's", KV_WHY))
    return digest, checks
