"""Where compile units run: worker threads on this machine, or tasks on a Ray cluster.

An executor takes the units and the function that compiles and publishes one
(``work(unit, groups)``, which starts its engine processes through a
:class:`.scheduler.ProcessGroups` and raises to fail its unit) and returns one
:class:`.scheduler.UnitResult` per unit. The store, retries, logs and the report are
the work function's and the caller's, so they are the same on every executor.

Executors are found by name in :data:`EXECUTORS` (name -> import path -> install hint, as fsspec's
``registry.py`` finds filesystems), imported only when asked for: a third executor is one row.
"""

from __future__ import annotations

import contextlib
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronbuild.engines.base import UnitEstimate
from neuronbuild.errors import UserError
from neuronbuild.graph import CompileUnit
from neuronbuild.orchestrate.events import BuildObserver
from neuronbuild.orchestrate.scheduler import Claim, ProcessGroups, UnitResult, run_units

Work = Callable[[CompileUnit, ProcessGroups], Any]


@dataclass(frozen=True)
class Registered:
    """One row of :data:`EXECUTORS`: ``compile --executor NAME`` imports ``import_path``
    (``module:Class``, called with the ``--address``); ``install_hint`` is the command that
    installs ``requires``, the optional dependency it needs beyond neuronbuild's own (None:
    nothing); ``connects``: it takes ``--address``."""

    name: str
    import_path: str
    install_hint: str | None = None
    requires: str | None = None
    connects: bool = False


EXECUTORS: dict[str, Registered] = {
    row.name: row
    for row in (
        Registered("local", "neuronbuild.orchestrate.executor:LocalExecutor"),
        Registered(
            "ray",
            "neuronbuild.orchestrate.ray_executor:RayExecutor",
            "pip install 'neuronbuild[ray]'",
            requires="Ray",
            connects=True,
        ),
    )
}
"""Every executor ``compile --executor`` knows, by name."""


@dataclass(frozen=True)
class Batch:
    """The arguments of one :meth:`Executor.run` call."""

    units: Sequence[CompileUnit]
    work: Work
    jobs: int
    observer: BuildObserver
    estimates: Mapping[str, UnitEstimate]
    logs: Mapping[str, Path] = field(default_factory=dict)
    claim: Claim | None = None


class Executor(ABC):
    """Runs compile units somewhere and reports each one's outcome."""

    def run(
        self,
        units: Sequence[CompileUnit],
        work: Work,
        jobs: int,
        observer: BuildObserver,
        estimates: Mapping[str, UnitEstimate],
        logs: Mapping[str, Path] | None = None,
        claim: Claim | None = None,
    ) -> list[UnitResult]:
        """Run ``work`` for every unit, at most ``jobs`` at once, telling ``observer`` as each
        starts (with its log file from ``logs``, by unit key) and ends; ``estimates`` (by unit
        key) size each unit's resources where the executor reserves them. ``claim``
        (:data:`~neuronbuild.orchestrate.scheduler.Claim`) is asked here, just before a unit would
        start: a unit it does not give is not run (its result is ``held``) and the next one is
        taken. Returns one result per unit, in the order of ``units``; ``seconds`` is the unit's
        own run time.

        Raises:
            Interrupted: a stop signal (SIGINT, SIGTERM, SIGHUP) arrived; every engine process
                was ended.
        """
        batch = Batch(units, work, jobs, observer, estimates, dict(logs or {}), claim)
        return self._execute(batch)

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Hold what :meth:`run` connects to across several calls (a compile's rounds of
        claiming and waiting); nothing for executors that connect to nothing.

        Raises:
            StoreError: the cluster cannot be reached.
        """
        yield

    @abstractmethod
    def _execute(self, batch: Batch) -> list[UnitResult]:
        """:meth:`run` for this executor."""


class LocalExecutor(Executor):
    """Worker threads on this machine, each running its unit's engine processes
    (:func:`~neuronbuild.orchestrate.scheduler.run_units`)."""

    def __init__(self, address: str | None = None) -> None:
        del address  # not a connecting executor: executor_for refuses one

    def _execute(self, batch: Batch) -> list[UnitResult]:
        return run_units(
            batch.units, batch.work, batch.jobs, batch.observer, batch.logs, batch.claim
        )


def executor_for(name: str, address: str | None = None) -> Executor:
    """The executor ``compile --executor NAME [--address URL]`` asks for, from :data:`EXECUTORS`.

    Raises:
        UserError: an unknown name, ``--address`` for an executor that connects to nothing, or
            an optional dependency not installed (the message gives the install command).
    """
    row = EXECUTORS.get(name)
    if row is None:
        raise UserError(f"--executor {name!r}: expected one of {', '.join(EXECUTORS)}")
    if address is not None and not row.connects:
        connecting = " or ".join(f"--executor {r.name}" for r in EXECUTORS.values() if r.connects)
        raise UserError(f"--address: only {connecting} connects to a cluster; drop it")
    module, _, attribute = row.import_path.partition(":")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except ImportError:
        if row.install_hint is None:
            raise
        raise UserError(
            f"--executor {name} needs {row.requires}, which is not installed: {row.install_hint}"
        ) from None
    executor: Executor = found(address)
    return executor
