"""Where compile units run: worker threads on this machine, or tasks on a Ray cluster.

An executor takes the units and the function that compiles and publishes one
(``work(unit, groups)``, which starts its engine processes through a
:class:`.scheduler.ProcessGroups` and raises to fail its unit) and returns one
:class:`.scheduler.UnitResult` per unit. The store, retries, logs and the report are
the work function's and the caller's, so they are the same on every executor.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from neuronbuild.build.scheduler import ProcessGroups, UnitResult, run_units
from neuronbuild.engines.base import UnitEstimate
from neuronbuild.errors import UserError
from neuronbuild.graph import CompileUnit
from neuronbuild.ui.progress import Progress

Work = Callable[[CompileUnit, ProcessGroups], Any]

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Batch:
    """The arguments of one :meth:`Executor.run` call."""

    units: Sequence[CompileUnit]
    work: Work
    jobs: int
    progress: Progress
    estimates: Mapping[str, UnitEstimate]


class Executor(ABC):
    """Runs compile units somewhere and reports each one's outcome."""

    def run(
        self,
        units: Sequence[CompileUnit],
        work: Work,
        jobs: int,
        progress: Progress,
        estimates: Mapping[str, UnitEstimate],
    ) -> list[UnitResult]:
        """Run ``work`` for every unit, at most ``jobs`` at once; ``estimates`` (by unit key)
        size each unit's resources where the executor reserves them. Returns one result per unit,
        in the order of ``units``; ``seconds`` is the unit's own run time.

        Raises:
            Interrupted: SIGINT or SIGTERM arrived; every engine process was ended.
        """
        return self._execute(Batch(units, work, jobs, progress, estimates))

    @abstractmethod
    def _execute(self, batch: Batch) -> list[UnitResult]:
        """:meth:`run` for this executor."""


class LocalExecutor(Executor):
    """Worker threads on this machine, each running its unit's engine processes
    (:func:`~neuronbuild.build.scheduler.run_units`)."""

    def _execute(self, batch: Batch) -> list[UnitResult]:
        return run_units(batch.units, batch.work, batch.jobs, batch.progress)


def executor_for(name: str, address: str | None = None) -> Executor:
    """The executor ``compile --executor NAME [--address URL]`` asks for.

    Raises:
        UserError: an unknown name, ``--address`` without ``ray``, or Ray not installed (the
            message says how to install it).
    """
    if name == "local":
        if address is not None:
            raise UserError("--address: only --executor ray connects to a cluster; drop it")
        return LocalExecutor()
    if name == "ray":
        from neuronbuild.build.ray_executor import RayExecutor

        return RayExecutor(address)
    raise UserError(f"--executor {name!r}: expected one of {', '.join(EXECUTORS)}")
