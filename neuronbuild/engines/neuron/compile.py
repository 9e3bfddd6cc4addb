"""The ``neuron`` engine's compile half: one vLLM-Neuron run in CPU compile mode per phase unit.

The contract it follows (reference/vllm-neuron-contract.md sections 2, 3 and 6, re-checked against
aws-neuron-sdk @81ce03ae ``vllm-neuron/docs/design/compilation/cpu_compilation.md`` and
``compilation_cache.md``): the process runs with ``VLLM_NEURON_CPU_COMPILE=1`` and
``NEURON_PLATFORM_TARGET_OVERRIDE=<target>`` in its environment from the start (so before any Neuron
import), never ``VLLM_NEURON_CPU_MODE``, a private scratch ``VLLM_CACHE_ROOT`` on local disk, the
API server command line serve passes for the recipe (:func:`compile_argv`) and the unit's keyed
variables, and the skip switches of the phases the unit's graphs do not need (vision graphs come
with prefill, :data:`~neuronbuild.engines.neuron.engine.PHASES`). vLLM-Neuron does not exit after
compiling, so the worker (:mod:`neuronbuild.engines.neuron.compile_worker`) stops the server once
it is healthy; the scheduler ends what is left of its process group.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from neuronbuild import envs, start_env
from neuronbuild.engines.base import Engine
from neuronbuild.engines.compiler import CompileRun, EngineCommand, Failure, UnitCompiler
from neuronbuild.engines.neuron.engine import PHASE_OF_KIND, speculative_tokens
from neuronbuild.engines.neuron.nki import (
    COMPILE_CACHE,
    SHARED_DIRS,
    kernel_files,
)
from neuronbuild.errors import UserError
from neuronbuild.graph import CompileUnit
from neuronbuild.human import count, size

if TYPE_CHECKING:
    from neuronbuild.recipe import Recipe

COMPLETE_MARKER = ".compilation_complete"
"""Written last into an entry by ``_store_local`` (S4 ``compile/cache.py``, Infinity-AI-Institute
/vllm-neuron @7f4cca75)."""

RANK_DIR = re.compile(r"^(?:.+\.)?rank\d+$")
"""Per-rank capture folders inside an entry (``rank<N>`` or ``<server_prefix>.rank<N>``, S4
``compile/capture_backend.py``): scratch of the capture, not part of the artifact."""

DEFAULT_COMPILE_GIB = 8.0
"""Host memory one neuronx-cc process is assumed to take (GiB) unless
``NEURONBUILD_NEURON_COMPILE_GIB`` says otherwise: users report 384 concurrent processes peaking at
1.9 TB (about 5 GiB each) at TP=64 (contract section 6), rounded up for larger graphs."""

CC_FAILED = re.compile(r"neuronx-cc compilation failed with (-?\d+)")
"""``RuntimeError("neuronx-cc compilation failed with {status}. Check compiler logs.")`` (S4
``compile/backend.py`` ``neuroncc_compile``, AWShtokoyo/vllm-neuron @eabd4c9f)."""

NCC_CODE = re.compile(r"\b(NCC_[A-Z]+[0-9]+)\b")
"""neuronx-cc's error codes, e.g. ``NCC_INLA001`` (vllm-project/vllm-neuron#16)."""

FATAL = re.compile(r"FATAL: *(.+)")
"""``sys.exit(f"FATAL: {exc}")`` of ``CompilationLock.__exit__`` (S4 ``compile/cache.py``)."""

BUCKET = re.compile(
    r"(prefill bucket \d+(?: with kv_segment_size \d+)?|decode \(batch=\d+, seq=\d+\)"
    r"|(?:vision encoder|vision|encoder)[a-z ]* bucket \d+)",
    re.IGNORECASE,
)
"""How vLLM-Neuron names a failing bucket: "Model graph extraction failed for prefill bucket ...",
"... for decode (batch=..., seq=...)", "Vision encoder warmup failed for bucket ..." (S4
``vllm/worker/neuron_worker.py``)."""

DEFAULT_TRACE_GIB = 4.0
"""Host memory one child of the extraction step's trace pool takes (GiB): "per-child meta-swap
... ~3-4 GB / child" (AWShtokoyo/vllm-neuron ``vllm_neuron/vllm/worker/neuron_worker.py``
``_extract_graphs`` docstring @01c89e38; fidelity row A11)."""

DEFAULT_TRACE_WORKERS = 8
"""``VLLM_NEURON_PARALLEL_TRACE_WORKERS``' default, children per rank (F1 ``vllm_neuron/envs.py``
@eabd4c9f; the LNL-era name is not visible, row A11)."""

OOM_EXIT_CODES = (-9, 137)
"""A process killed by SIGKILL: -9 from ``Popen``, 137 from a shell; the plugin's own hint for -9
is "typically ... Out Of Memory (OOM) killer" (S4 ``compile/backend.py``)."""


CGROUP_MEMORY_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


def host_memory_gib() -> float:
    """Memory this process may use (GiB): the host's physical memory, or the cgroup's limit
    (v2 ``memory.max``, v1 ``memory.limit_in_bytes``) when that is lower."""
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in CGROUP_MEMORY_LIMITS:
        try:
            memory = min(memory, int(path.read_text().strip()))
        except (OSError, ValueError):  # absent, or "max": no limit
            continue
    return memory / 2**30


def host_cores() -> int:
    """CPU cores this process may use."""
    return len(os.sched_getaffinity(0))


def compile_gib() -> float:
    """The per-process memory estimate (GiB): ``NEURONBUILD_NEURON_COMPILE_GIB`` or the default.

    Raises:
        EnvInvalid: the variable is not a positive number (exit 2, naming it).
    """
    value = envs.COMPILE_GIB.get(start_env.environ())
    return DEFAULT_COMPILE_GIB if value is None else value


def is_complete(entry: Path) -> bool:
    """vLLM-Neuron's own completeness rule (``_is_cache_complete`` plus the load-time key check,
    S4 ``compile/cache.py``): ``graph.hlo``, ``graph_<key>.neff``, ``.compilation_complete`` and an
    ``.artifact_metadata_v*.json`` whose ``cache_key`` equals the folder name."""
    key = entry.name
    needed = ("graph.hlo", f"graph_{key}.neff", COMPLETE_MARKER)
    if not all((entry / name).is_file() for name in needed):
        return False
    for meta in sorted(entry.glob(".artifact_metadata_v*.json")):
        try:
            if json.loads(meta.read_text()).get("cache_key") == key:
                return True
        except (OSError, ValueError, AttributeError):
            continue
    return False


def entry_files(entry: Path) -> list[Path]:
    """The files of one entry worth keeping: every regular file but rank capture folders,
    temporary and lock files and the ``.cache_accessed`` touch file (rewritten on every hit)."""
    out = []
    for path in sorted(entry.rglob("*")):
        rel = path.relative_to(entry)
        if any(RANK_DIR.match(part) for part in rel.parts[:-1]):
            continue
        name = rel.name
        if ".tmp" in name or name.endswith(".lock") or name == ".cache_accessed":
            continue
        if path.is_file() and not path.is_symlink():
            out.append(path)
    return out


def classify_failure(exit_code: int, log: str) -> Failure:
    """Read a failed vLLM-Neuron run. An OOM kill (exit -9/137, or neuronx-cc killed with -9) is
    retried with fewer workers; a neuronx-cc error code (``NCC_*``) is a compiler error that fails
    the unit; a bare "neuronx-cc compilation failed with 70" is retried once (intermittent at
    TP=64, aws-neuron-sdk#1369, yet also deterministic crashes, vllm-neuron#11: contract section
    6); "FATAL:" and anything else fail the unit."""
    statuses = [int(s) for s in CC_FAILED.findall(log)]
    bucket_match = BUCKET.search(log)
    bucket = bucket_match.group(1) if bucket_match else None
    ncc = NCC_CODE.search(log)
    if exit_code in OOM_EXIT_CODES or any(s in OOM_EXIT_CODES for s in statuses):
        return Failure(
            "killed for memory (SIGKILL: the OOM killer)", "fewer_workers", "SIGKILL", bucket
        )
    if ncc is not None:
        return Failure(f"neuronx-cc error {ncc.group(1)}", "none", ncc.group(1), bucket)
    if statuses:
        status = statuses[-1]
        reason, code = f"neuronx-cc compilation failed with {status}", f"neuronx-cc exit {status}"
        if status == 70:
            return Failure(reason, "backoff", code, bucket)
        return Failure(reason, "none", code, bucket)
    fatal = FATAL.findall(log)
    if fatal:
        return Failure(f"FATAL: {fatal[-1].strip()[:200]}", "none", None, bucket)
    return Failure(f"vLLM-Neuron exited with {exit_code}", "none", None, bucket)


# Serve-only switches kept from the compile run (contract sections 2 and 4): with warmup compile
# disabled every graph is a fatal cache miss, without the graph-capture backend CPU compile
# extracts nothing yet exits 0, and asserting cache hits fails every graph being compiled.
SERVE_ONLY = (
    envs.VLLM_NEURON_DISABLE_WARMUP_COMPILE,
    envs.NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND,
    envs.VLLM_NEURON_ASSERT_CACHE_HIT,
    envs.NEURON_LIBTORCH_ASSERT_CACHE_HIT,
)


# The lock wait (contract sections 3 and 6: references name the first, S2 tutorials the second).
COMPILATION_TIMEOUTS = ("NEURON_LIBTORCH_COMPILATION_TIMEOUT", "VLLM_NEURON_COMPILATION_TIMEOUT")


def compile_argv(recipe: Recipe) -> list[str]:
    """The worker's command: the API server arguments serve passes for ``recipe``'s engine
    arguments (:func:`neuronbuild.engines.vllm_args.vllm_cli_args`, the one function both use),
    so vLLM-Neuron resolves one configuration at compile and at serve (rows A5, B10), the
    values the plan resolved included (:meth:`~neuronbuild.engines.base.Engine.start_args`)."""
    from neuronbuild.engines.registry import engine_for

    args = json.dumps(engine_for(recipe).start_argv(recipe))
    return [sys.executable, "-m", "neuronbuild.engines.neuron.compile_worker", args]


class NeuronCompiler(UnitCompiler):
    """Runs one phase of a recipe through vLLM-Neuron's CPU compile mode."""

    cache_dir: ClassVar[Path] = COMPILE_CACHE
    seeds_from_previous: ClassVar[bool] = True
    shared_dirs: ClassVar[frozenset[str]] = SHARED_DIRS

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.workers = 8  # vLLM-Neuron's default until concurrency() sizes it
        self.trace_workers = DEFAULT_TRACE_WORKERS  # likewise (size_trace_pool)

    def check_host(self, recipe: Recipe) -> None:
        if speculative_tokens(recipe):
            raise UserError(
                "speculative_config: vLLM-Neuron's CPU compile mode cannot build speculative "
                "decoding graphs (cpu_compilation.md: 'Speculative decoding is not supported with "
                "VLLM_NEURON_CPU_COMPILE'); plan shows them, compile them on a Neuron instance"
            )

    def concurrency(self, recipe: Recipe, units: int, jobs: int) -> tuple[int, str | None]:
        """Units at once and ``NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS`` from this host's RAM
        and cores. The workers setting applies per rank (contract section 6), so one unit runs
        ``tensor_parallel_size * workers`` compiler processes: the host's budget is
        ``min(cores, RAM / per-process GiB)`` processes, shared by the units. A workers value in
        the environment is the user's and is kept, so units at once are sized with it
        (``budget // (ranks * workers)``), with a note when one unit alone exceeds the budget;
        RAM is the cgroup's limit when lower (:func:`host_memory_gib`)."""
        per_process = compile_gib()
        ranks = int(recipe.engine_args.get("tensor_parallel_size") or 1)
        memory = host_memory_gib()
        budget = max(1, min(host_cores(), int(memory // per_process)))
        user_workers = envs.PARALLEL_COMPILE_WORKERS.get(start_env.environ())
        at_once = max(1, min(jobs, units, budget // (ranks * (user_workers or 1))))
        at_once = self.size_trace_pool(ranks, memory, at_once)
        self.workers = user_workers or max(1, budget // (at_once * ranks))
        note = None
        if at_once < min(jobs, units):
            note = f"compiling {count(at_once, 'unit')} at once, not {jobs}"

        def gib(amount: float) -> str:  # GiB as every other size is printed (human.size)
            return size(int(amount * 2**30))

        if ranks * (user_workers or 1) > budget:
            note = (
                f"even 1 unit at a time runs {count(ranks, 'rank')} x "
                f"{count(user_workers or 1, 'compile worker')} = "
                f"{ranks * (user_workers or 1)} neuronx-cc processes (about "
                f"{gib(ranks * (user_workers or 1) * per_process)} at {gib(per_process)} each) "
                f"on a host with {gib(memory)}; runs killed for memory are retried with "
                "fewer workers"
            )
        elif note is not None:
            note += (
                f" and {count(self.workers, 'compile worker')} per rank: {gib(memory)} and "
                f"{count(host_cores(), 'core')} at {gib(per_process)} per neuronx-cc process "
                f"(${envs.NEURONBUILD_NEURON_COMPILE_GIB}={per_process:g})"
            )
        removed = [name for name in SERVE_ONLY if name in start_env.environ()]
        if removed:
            warning = f"{', '.join(removed)} removed from the compile run (serve-only switches)"
            note = warning if note is None else f"{warning}; {note}"
        return at_once, note

    def size_trace_pool(self, ranks: int, memory_gib: float, at_once: int) -> int:
        """The extraction step forks a trace pool per rank before it compiles (row A11), so its
        children count in host memory like compiler processes: units at once are lowered until
        each unit's ``ranks`` pools of at least one child (the user's
        ``VLLM_NEURON_PARALLEL_TRACE_WORKERS`` if set) fit in ``memory_gib`` at
        :data:`DEFAULT_TRACE_GIB` each, and :attr:`trace_workers` is sized to what is left (at
        most the plugin's default). Returns the units at once."""
        user = envs.PARALLEL_TRACE_WORKERS.get(start_env.environ())
        fits = int(memory_gib // (ranks * (user or 1) * DEFAULT_TRACE_GIB))
        at_once = max(1, min(at_once, fits))
        spare = int(memory_gib // (at_once * ranks * DEFAULT_TRACE_GIB))
        self.trace_workers = user or max(1, min(DEFAULT_TRACE_WORKERS, spare))
        return at_once

    def run_command(self, run: CompileRun) -> EngineCommand:
        recipe, unit, cache_root = run.recipe, run.unit, run.cache_root
        pressure, timeout = run.pressure, run.timeout
        started_with = start_env.environ()
        env = self.engine.engine_env(started_with, unit.key.factors["env"])
        workers = envs.PARALLEL_COMPILE_WORKERS.get(started_with) or self.workers
        workers = max(1, workers >> pressure)
        trace = envs.PARALLEL_TRACE_WORKERS.get(started_with) or self.trace_workers
        trace = max(1, trace >> pressure)  # OOM: both pools shrink
        env.update(
            {
                envs.VLLM_CACHE_ROOT: str(cache_root),
                # LNL's own cache root (fidelity row B8) is the scratch root too, so a user's
                # value cannot divert the entries from the harvest.
                envs.NEURON_LIBTORCH_CACHE_ROOT: str(cache_root),
                envs.HF_HUB_OFFLINE: "1",  # vLLM runs offline (README): files are local
                envs.VLLM_NEURON_CPU_COMPILE: "1",
                envs.NEURON_PLATFORM_TARGET_OVERRIDE: recipe.target,
                envs.NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS: str(workers),
                envs.VLLM_NEURON_PARALLEL_TRACE_WORKERS: str(trace),
            }
        )
        built = {PHASE_OF_KIND[g.kind] for g in unit.graphs}
        for phase, switch in envs.VLLM_NEURON_SKIP_WARMUP.items():
            if phase not in built:
                env[switch] = "1"
        for name in SERVE_ONLY:
            env.pop(name, None)
        if timeout is not None:
            # TP ranks (and units) share a graph's lock; a waiter gives up after the 600 s
            # default with "Shared compilation timeout" (contract sections 3 and 9), so it waits
            # as long as the unit may run, unless the user set it.
            for name in COMPILATION_TIMEOUTS:
                if name not in started_with:
                    env[name] = str(max(1, math.ceil(timeout)))
        return EngineCommand(compile_argv(recipe), env, recipe.workdir)

    def classify(self, exit_code: int, log: str) -> Failure:
        return classify_failure(exit_code, log)

    def settle_seeded(self, cache_root: Path, unit: CompileUnit, seeded: set[str]) -> None:
        """vLLM-Neuron writes ``.cache_accessed`` into an entry it loads on a hit (contract
        section 3; seeded entries never carry one, see :func:`entry_files`): a seeded entry
        without it belongs to a graph this configuration no longer has and is dropped, so a unit's
        content does not depend on the store's history. Every graph needs an entry, written or
        hit. The NKI folders (:data:`~.nki.SHARED_DIRS`) are no entries and stay."""
        root = cache_root / COMPILE_CACHE
        for name in seeded - SHARED_DIRS:
            if not (root / name / ".cache_accessed").exists():
                shutil.rmtree(root / name, ignore_errors=True)
        entries = [p for p in root.glob("*") if p.is_dir() and is_complete(p)]
        if len(entries) < len(unit.graphs):
            raise RuntimeError(
                f"vLLM-Neuron left {count(len(entries), 'complete entry', 'complete entries')} "
                f"(written or hit) under {root} for {count(len(unit.graphs), 'graph')}"
            )

    def harvest(self, cache_root: Path) -> list[Path]:
        """Every complete entry's files, the plugin's ``nki/`` cache and a copy of each NKI
        kernel binary the entries' graphs reference (:mod:`.nki`, fidelity rows B6, B7).

        Raises:
            RuntimeError: no complete entry, or a referenced kernel binary is nowhere.
        """
        root = cache_root / COMPILE_CACHE
        entries = [p for p in sorted(root.glob("*")) if p.is_dir() and is_complete(p)]
        if not entries:
            raise RuntimeError(f"vLLM-Neuron wrote no complete entry under {root}")
        files = [path for e in entries for path in entry_files(e)]
        files += kernel_files(root, entries)
        return [path.relative_to(cache_root) for path in files]
