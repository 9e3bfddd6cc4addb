"""The conformance kit: gather what a real compile host or Neuron node shows about a recipe's
latest build and judge it with :mod:`neuronbuild.engines.neuron.conformance` (issue 18 item 10).

On a compile host it reads the store's manifest (a few small files of each entry, fetched
verified) and this host's installed versions; on a node it also lays the manifest out, takes one
entry away and starts vLLM as ``serve`` would, for at most ``timeout`` seconds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from neuronbuild import envs, start_env
from neuronbuild.engines.neuron.conformance import (
    START_WHAT,
    Check,
    StartOutcome,
    check_layout,
    check_nki_paths,
    check_optimization_level,
    check_precompile_cache,
    check_release,
    check_removed_entry,
    check_route,
    check_versions,
    check_whole_start,
    skipped,
)
from neuronbuild.engines.neuron.coverage import complete_entries
from neuronbuild.engines.neuron.engine import NEURON_OPTIMIZATION_LEVEL
from neuronbuild.engines.neuron.nki import CARRIED, COMPILE_CACHE, intermediate_root, kernel_refs
from neuronbuild.engines.neuron.releases import RUNTIMES, rules_for
from neuronbuild.engines.registry import machine_labels
from neuronbuild.engines.versions import installed_version
from neuronbuild.errors import StoreError, UserError
from neuronbuild.plan import build_plan
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
    plan = build_plan(recipe)
    build = store.build_for(digest, machine_labels(plan.units[0].key.factors))
    if build is None:
        raise UserError(
            f"{recipe.name}/latest in {store.url} names an index with no build for "
            f"{recipe.source}'s target and toolchain; run `neuronbuild compile {recipe.source} "
            f"--cache {store.url} --index` first"
        )
    return build, store.get_manifest(build)


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


def metadata_key(file: Path) -> str:
    """The ``cache_key`` an entry's metadata file records; empty when it is not a JSON object
    with one (a malformed file, which the plugin would refuse too)."""
    try:
        data = json.loads(file.read_text())
    except (ValueError, UnicodeDecodeError):
        return ""
    return str(data.get("cache_key", "")) if isinstance(data, dict) else ""


def manifest_checks(recipe: Recipe, store: Store, manifest: Manifest, work: Path) -> list[Check]:
    """Rows B2, B10 and B7, judged from the manifest's own files (those of :data:`READ` and the
    metadata, fetched verified into ``work``)."""
    prefix = PurePosixPath(COMPILE_CACHE.as_posix())
    paths = [f.path for f in manifest.files()]
    by_entry: dict[str, dict[str, Path]] = {}
    for path, file in fetch_small_files(store, manifest.files(), work).items():
        rel = PurePosixPath(path)
        if rel.is_relative_to(prefix) and len(rel.relative_to(prefix).parts) == 2:
            entry, name = rel.relative_to(prefix).parts
            by_entry.setdefault(entry, {})[name] = file
    keys = {
        e: metadata_key(file)
        for e, files in by_entry.items()
        for name, file in files.items()
        if name.startswith(".artifact_metadata")
    }
    commands = {e: f["command.txt"].read_text() for e, f in by_entry.items() if "command.txt" in f}
    level = int(recipe.engine_args.get("optimization_level", NEURON_OPTIMIZATION_LEVEL))
    root = intermediate_root()
    refs = {e: kernel_refs(f["graph.hlo"], root) for e, f in by_entry.items() if "graph.hlo" in f}
    carried_prefix = prefix / CARRIED
    carried = {
        PurePosixPath(p).relative_to(carried_prefix).as_posix()
        for p in paths
        if PurePosixPath(p).is_relative_to(carried_prefix)
    }
    return [
        check_layout(paths, prefix.as_posix(), keys),
        check_optimization_level(level, commands),
        check_nki_paths(refs, carried, str(root)),
    ]


READY = "Application startup complete"
"""The line vLLM's API server logs once it serves (uvicorn's startup message)."""


def start_for(
    argv: list[str], env: dict[str, str], cwd: Path, timeout: float, ready: str | None = None
) -> tuple[int | None, str]:
    """Run ``argv`` in a session of its own for at most ``timeout`` seconds, or until it logs a
    line holding ``ready``; its exit status (None: still running, at the limit or once ready)
    and its stdout and stderr together. Its whole process group is killed when it ends either
    way, so vLLM's engine and worker processes never outlive the kit."""
    with subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    ) as process:
        lines: list[str] = []
        done = threading.Event()

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                lines.append(line)
                if ready is not None and ready in line:
                    done.set()
            done.set()

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        done.wait(timeout)
        if not reader.is_alive():  # its output ended: it is exiting
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        code = process.poll()
        # Whatever the start left in its session (vLLM's engine helpers) ends with it.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        reader.join(5)
        return code, "".join(lines)


def start_without_one_entry(
    recipe: Recipe, store: Store, manifest: Manifest, work: Path, timeout: float
) -> StartOutcome | None:
    """Lay the manifest out under ``work`` as serve does (through a local tier under ``work``,
    so the user's store is only read), remove its first complete entry and start vLLM with
    serve's argv and environment for at most ``timeout`` seconds (:func:`start_for`). None when
    the build holds no complete entry to remove.

    Raises:
        UserError: serve refuses this node before vLLM starts (the refusal says why).
    """
    complete = sorted(complete_entries(f.path for f in manifest.files()))
    if not complete:
        return None
    tiers = TieredStore(Store(str(work / "local-tier"), create=True), store)
    root = work / "serve-cache"
    prepared = prepare(ServeSource(recipe=recipe.source), tiers, cache_root=root)
    shutil.rmtree(root / COMPILE_CACHE / complete[0])
    start = time.monotonic()
    code, output = start_for(prepared.argv, prepared.env, prepared.cwd, timeout)
    return StartOutcome(code, output, time.monotonic() - start, complete[0])


NODE_LOCAL = ("modelinfos",)
"""Folders under ``VLLM_CACHE_ROOT`` a start writes for this node alone: vLLM's model-info cache
(``vllm/model_executor/models/registry.py``), rebuilt at every fresh start."""

NOT_PRECOMPILE = (COMPILE_CACHE.as_posix(), *NODE_LOCAL)
"""What a start writes under the layout root that is not a Precompile Cache: the compile
cache's own files (``.cache_accessed``) and :data:`NODE_LOCAL`."""


@dataclass(frozen=True)
class WholeStart:
    """A start of the whole build: its ``env``, the files it ``written`` beside the compile
    cache and the compile outputs it wrote into it (``compiled``, root-relative: NEFFs and
    ``.compilation_complete`` markers, which only a compile writes), whether it ``served``
    (exited 0 or logged :data:`READY`), its exit ``code`` (None: running at the time limit),
    its ``output`` and how many ``seconds`` it ran."""

    env: dict[str, str]
    written: list[str]
    compiled: list[str]
    served: bool
    code: int | None
    output: str
    seconds: float

    @property
    def tail(self) -> str:
        """The last line of its output."""
        return (self.output.strip().splitlines() or [""])[-1]


C1_WHAT = "serve with one entry removed fails at start instead of compiling"
R3_WHAT = "a node start with the Precompile Cache on writes it"


def start_whole(recipe: Recipe, store: Store, work: Path, timeout: float) -> WholeStart:
    """Lay the whole build out under ``work`` as serve does (through a local tier under ``work``,
    which C1's start then reads, so nothing is fetched twice) and start vLLM with serve's argv and
    environment until it serves (:data:`READY`), exits, or ``timeout`` seconds pass
    (:func:`start_for`).

    Raises:
        UserError: serve refuses this node before vLLM starts (the refusal says why).
        StoreError: the store or the local tier failed (a full disk: NoRoom).
    """
    tiers = TieredStore(Store(str(work / "local-tier"), create=True), store)
    root = work / "serve-whole"
    prepared = prepare(ServeSource(recipe=recipe.source), tiers, cache_root=root)
    before = {p for p in root.rglob("*") if p.is_file()}
    start = time.monotonic()
    code, output = start_for(prepared.argv, prepared.env, prepared.cwd, timeout, READY)
    seconds = time.monotonic() - start
    added = [
        path.relative_to(root).as_posix()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path not in before
    ]
    written = [
        p for p in added if not any(PurePosixPath(p).is_relative_to(o) for o in NOT_PRECOMPILE)
    ]
    compiled = [
        p
        for p in added
        if PurePosixPath(p).is_relative_to(COMPILE_CACHE.as_posix())
        and (p.endswith(".neff") or PurePosixPath(p).name == ".compilation_complete")
    ]
    served = code == 0 or (code is None and READY in output)
    return WholeStart(prepared.env, written, compiled, served, code, output, seconds)


def node_check(
    recipe: Recipe, store: Store, manifest: Manifest, work: Path, timeout: float
) -> Check:
    """Row C1 on a node: :func:`start_without_one_entry`, judged; a FAIL when serve refuses the
    node first, a SKIP when there is no entry to remove."""
    try:
        outcome = start_without_one_entry(recipe, store, manifest, work, timeout)
    except UserError as exc:
        return Check("C1", C1_WHAT, "FAIL", f"serve refused this node: {exc}")
    if outcome is None:
        return skipped("C1", C1_WHAT, "the build holds no complete entry to remove (see B2)")
    return check_removed_entry(outcome)


def node_checks(
    recipe: Recipe, store: Store, manifest: Manifest, work: Path, timeout: float
) -> list[Check]:
    """Rows S0, C1 and R3 on a node: the whole build's start judged (S0, and R3 on the same
    start), then, only if it served, the start without one entry (C1)."""
    try:
        whole = start_whole(recipe, store, work, timeout)
    except (UserError, StoreError) as exc:
        refused = f"serve refused this node: {exc}"
        return [
            Check("S0", START_WHAT, "FAIL", refused),
            skipped("C1", C1_WHAT, "the complete build did not start (S0)"),
            Check("R3", R3_WHAT, "FAIL", refused),
        ]
    planned = sum(len(unit.graphs) for unit in manifest.units)
    start = check_whole_start(whole, planned)
    if start.status == "PASS":
        c1 = node_check(recipe, store, manifest, work, timeout)
    else:
        why = "the complete build did not serve (S0): a start without one entry proves nothing"
        c1 = skipped("C1", C1_WHAT, why)
    rules = rules_for(recipe.toolchain)
    r3 = check_precompile_cache(rules, whole.env, whole.written, whole.served, whole.tail)
    return [start, c1, r3]


def run_kit(recipe: Recipe, cache: str, host: Host, timeout: float) -> tuple[str, list[Check]]:
    """The manifest digest of ``recipe``'s latest build in store ``cache`` and every check of the
    kit on it, on a ``compile`` host or a Neuron ``node``, in a fixed order (B12, R1, R2, B2,
    B10, B7, S0, C1, R3, B15); ``timeout``: seconds each of the node's two starts may run. The
    whole build's start (S0, whose output R3 also judges) comes first: C1's negative start is
    run only when the complete build served, since a build that cannot start fails C1's way too.

    The Neuron engine's kit (its ``conformance_kit``): ``neuronbuild conformance`` runs it for
    a neuron recipe only.

    Raises:
        UserError: nothing was compiled for ``recipe`` in the store.
    """
    store = Store(cache)
    digest, manifest = latest_manifest(recipe, store)
    installed = {d: installed_version(d) for d in {*recipe.toolchain, *RUNTIMES}}
    keyed = manifest.units[0].factors.get("env") if manifest.units else None
    keyed = keyed if isinstance(keyed, dict) else {}
    node_env = start_env.environ()
    rules = rules_for(recipe.toolchain)
    checks = [
        check_versions(recipe.toolchain, installed),
        check_release(recipe.toolchain, installed),
        check_route(
            rules, keyed.get(envs.VLLM_NEURON_BACKEND), node_env.get(envs.VLLM_NEURON_BACKEND)
        ),
    ]
    with tempfile.TemporaryDirectory(prefix="neuronbuild-kit-") as tmp:
        checks += manifest_checks(recipe, store, manifest, Path(tmp) / "files")
        if host == "node":
            checks += node_checks(recipe, store, manifest, Path(tmp), timeout)
        else:
            why = "needs a Neuron node: run the kit there with --host node"
            checks.append(skipped("S0", START_WHAT, why))
            checks.append(skipped("C1", C1_WHAT, why))
            checks.append(skipped("R3", R3_WHAT, why))
    checks.append(skipped("B15", "KV block count at compile equals the device's", KV_WHY))
    return digest, checks
