"""The compile half of an engine: what one unit's compile runs, and what it leaves behind.

Kept apart from the planning half so that the runtime, which plans to check keys, never imports
anything that compiles.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal

from neuronbuild.graph import CompileUnit

if TYPE_CHECKING:
    from neuronbuild.recipe import Recipe


@dataclass(frozen=True)
class EngineCommand:
    """One engine process: ``argv`` run in ``cwd`` with exactly ``env``."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


def worker_command(module: str, recipe: Recipe, env: dict[str, str]) -> EngineCommand:
    """Run the worker ``module`` with this interpreter on the recipe's engine arguments (as
    JSON), in the recipe's folder."""
    argv = [sys.executable, "-m", module, json.dumps(recipe.engine_args)]
    return EngineCommand(argv, env, recipe.workdir)


ERROR_LINE_CHARS = 300
"""The most of an engine's error line a summary shows (a traceback's last line can be long)."""

_LOOKS_LIKE_ERROR = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b:|\berror:|\bERROR\b|\bFATAL\b")


def is_error(line: str) -> bool:
    """Whether ``line`` looks like an error (the summary quotes only such a line)."""
    return _LOOKS_LIKE_ERROR.search(line) is not None


_VALIDATION = re.compile(r"ValidationError: \d+ validation errors? for \w+")
"""pydantic's header line, whose detail (the field and what is wrong) is on the lines after it:
vLLM's configs (``ModelConfig``, ``SchedulerConfig``) are pydantic dataclasses."""

_PYDANTIC_TAIL = re.compile(r"\s*\[type=.*\]\s*$")
"""The ``[type=..., input_value=..., input_type=...]`` pydantic appends to each error."""


def error_line(log: str) -> str | None:
    """The engine's own last error line in the text ``log`` one run wrote: the last line that
    looks like an error (``SomethingError: ...``, ``error:``, ``ERROR``, ``FATAL``: Python's
    traceback ends with its exception, neuronx-cc and vLLM's logger mark theirs), else the last
    non-empty line; at most :data:`ERROR_LINE_CHARS` characters, stripped. None: nothing logged.

    A pydantic ``ValidationError`` header (vLLM refusing a config value) is followed by its first
    error, the field and the message (``... for ModelConfig: max_model_len: Input should be ...``),
    so the line names what to fix."""
    lines = [line.strip() for line in re.split(r"[\r\n]+", log) if line.strip()]
    found = [i for i, line in enumerate(lines) if is_error(line)] or [len(lines) - 1]
    if not lines:
        return None
    at = found[-1]
    said = lines[at]
    if _VALIDATION.search(said):
        detail = []
        for line in lines[at + 1 :]:
            if line.startswith("For further information") or is_error(line):
                break
            detail.append(_PYDANTIC_TAIL.sub("", line))
            if len(detail) == 2 or _PYDANTIC_TAIL.search(line):
                break
        said = ": ".join([said, *detail])
    return said[:ERROR_LINE_CHARS]


@dataclass(frozen=True)
class Failure:
    """Why one run of a unit's engine failed, as its engine reads the run's log.

    ``reason``: one line; ``retry``: ``backoff`` (transient: run again once, after a pause),
    ``fewer_workers`` (killed for memory: run again with less parallelism) or ``none``;
    ``code``: the error code the log names (``NCC_INLA001``, ``neuronx-cc exit 70``), if any;
    ``bucket``: the failing bucket as the log names it, if it does.
    """

    reason: str
    retry: Literal["none", "backoff", "fewer_workers"] = "none"
    code: str | None = None
    bucket: str | None = None


@dataclass(frozen=True)
class CompileRun:
    """One engine run asked of a compiler: the ``recipe``, the ``unit``, the scratch
    ``cache_root`` it compiles into, ``pressure`` (its runs killed for memory so far) and
    ``timeout`` (its time limit in seconds, None: none)."""

    recipe: Recipe
    unit: CompileUnit
    cache_root: Path
    pressure: int = 0
    timeout: float | None = None


class UnitCompiler(ABC):
    """Runs one compile unit in a subprocess and harvests the complete entries it wrote.

    ``cache_dir``: where the engine writes its entries, relative to ``VLLM_CACHE_ROOT`` (each
    child folder is one entry); ``seeds_from_previous``: whether a unit's scratch cache is seeded
    with the previous build's entries, so the engine's own cache check skips unchanged graphs;
    ``shared_dirs``: child folders of ``cache_dir`` that are no entry (e.g. vLLM-Neuron's NKI
    cache), carried with a unit but not counted as its entries; ``start_dirs``: folders outside
    ``cache_dir``, relative to ``VLLM_CACHE_ROOT``, where vLLM caches what it works out at every
    start (see :meth:`start_files`).
    """

    cache_dir: ClassVar[Path]
    seeds_from_previous: ClassVar[bool] = False
    shared_dirs: ClassVar[frozenset[str]] = frozenset()
    start_dirs: ClassVar[tuple[Path, ...]] = ()

    def settle_seeded(self, cache_root: Path, unit: CompileUnit, seeded: set[str]) -> None:
        """After a successful run: drop the seeded entries the run did not use, so a unit's
        files are only the ones its configuration needs; raise RuntimeError when the run left
        fewer entries than the unit has graphs. Engines that seed override it."""

    def check_install(self) -> None:
        """Raise UserError, saying how to fix it, when the engine's packages are broken."""

    def check_host(self, recipe: Recipe) -> None:
        """Raise UserError when this host cannot build ``recipe`` faithfully."""

    @staticmethod
    def installed_versions(distributions: list[str]) -> dict[str, str | None]:
        """Installed version of each distribution (None when absent)."""
        versions: dict[str, str | None] = {}
        for dist in distributions:
            try:
                versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                versions[dist] = None
        return versions

    def concurrency(self, recipe: Recipe, units: int, jobs: int) -> tuple[int, str | None]:
        """How many of ``units`` units to compile at once when the user asked for ``jobs``, and
        a note for the user when that differs or the host is tight; the default trusts ``jobs``."""
        return jobs, None

    def classify(self, exit_code: int, log: str) -> Failure:
        """Read a failed run (its exit code and the text it logged) as a :class:`Failure`."""
        return Failure(f"engine exited with {exit_code}")

    def command(
        self,
        recipe: Recipe,
        unit: CompileUnit,
        cache_root: Path,
        *,
        pressure: int = 0,
        timeout: float | None = None,
    ) -> EngineCommand:
        """The process that compiles ``unit`` into the scratch ``cache_root``; ``pressure`` counts
        the runs of this unit killed for memory so far (an engine lowers its parallelism);
        ``timeout``: the unit's time limit in seconds (None: none), for engines with their own.
        Each engine says how in :meth:`run_command`."""
        return self.run_command(CompileRun(recipe, unit, cache_root, pressure, timeout))

    @abstractmethod
    def run_command(self, run: CompileRun) -> EngineCommand:
        """The process that compiles ``run.unit`` (:meth:`command`'s arguments, as one value)."""

    @abstractmethod
    def harvest(self, cache_root: Path) -> list[Path]:
        """Files (relative to ``cache_root``) of every complete entry the process wrote.

        Raises RuntimeError when the process left no complete entry.
        """

    def start_files(self, cache_root: Path) -> list[Path]:
        """Files (relative to ``cache_root``) the process wrote under :attr:`start_dirs`: no
        compiled graph, but carried with the unit so a serving node skips that work too (vLLM's
        model-class inspection, ``modelinfos/``, about 12 s of every cold start on the CPU
        build). vLLM checks each against its own sources before use, so a stale one costs only
        the work it would have saved."""
        return [
            path.relative_to(cache_root)
            for folder in self.start_dirs
            for path in sorted((cache_root / folder).rglob("*"))
            if path.is_file() and not path.is_symlink()
        ]
