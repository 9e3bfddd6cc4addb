"""``compile --executor ray``: each compile unit as one Ray task on an existing cluster, or on a
local one Ray starts.

A task runs the same work function as a local worker (engine processes in their own process group,
publish to the same store), so retries, logs and the report are unchanged; it asks Ray for the
unit's estimated cores and memory (:meth:`~neuronbuild.engines.base.Engine.estimate`), capped at
the largest node so that no task waits forever for a node that cannot exist. Every node needs
neuronbuild and the engine's toolchain installed (the node image), the recipe's folder (a
relative ``model`` resolves there) and credentials for the store.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import ray

from neuronbuild import envs, notices
from neuronbuild.errors import Interrupted, StoreDataInvalid, StoreError
from neuronbuild.graph import CompileUnit
from neuronbuild.orchestrate.executor import Batch, Executor, Work
from neuronbuild.orchestrate.scheduler import (
    KILL_GRACE_SECONDS,
    Held,
    ProcessGroups,
    UnitResult,
    signals_cancel,
    unit_finished,
    unit_started,
)

TASK_RETRIES = 1
"""Ray re-runs a task whose worker or node died (not one whose unit failed): publishing is
idempotent, so a rerun is safe."""

GIB = 1 << 30


def run_in_task(
    work: Work, unit: CompileUnit, listener: notices.RetryListener | None = None
) -> tuple[Any, float]:
    """The body of one Ray task: ``work(unit, groups)`` on a thread of the worker, returning its
    value and its run time in seconds; the unit's retry notices go to ``listener`` (the driver's,
    printing on the worker's stderr as on a local worker's) while it runs.

    ``ray.cancel`` interrupts the task's main thread (a KeyboardInterrupt); the engine processes
    live in their own process group, out of Ray's reach, so they are ended here before the
    interrupt goes on.
    """
    groups = ProcessGroups()
    outcome: dict[str, Any] = {}
    previous = notices.set_retry_listener(listener) if listener is not None else None

    def target() -> None:
        start = time.monotonic()
        try:
            outcome["value"] = work(unit, groups)
        except BaseException as exc:  # re-raised in the task's thread below
            outcome["error"] = exc
        outcome["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
    except BaseException:
        groups.end_all()
        thread.join(KILL_GRACE_SECONDS + 5)
        raise
    finally:
        if listener is not None:
            notices.set_retry_listener(previous)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"], outcome["seconds"]


class RayExecutor(Executor):
    """Units as Ray tasks on the cluster at ``address`` (``ray://host:10001``, ``host:6379`` or
    ``auto``); None: ``$RAY_ADDRESS`` if set, else a local cluster Ray starts and stops here."""

    def __init__(self, address: str | None) -> None:
        self.ray: Any = ray
        self.address = address
        self._held = False  # inside session(): run connects and shuts down nothing

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        """Connect once (or start one local cluster) for every :meth:`run` inside; shut a
        cluster started here down at the end."""
        if self._held:
            yield
            return
        started = self._connect()
        self._held = True
        try:
            yield
        finally:
            self._held = False
            if started:
                self.ray.shutdown()

    def _connect(self) -> bool:
        """Connect (or start a local cluster); True when this call started the session."""
        if self.ray.is_initialized():
            return False
        options: dict[str, Any] = {"log_to_driver": False, "configure_logging": False}
        try:
            self.ray.init(address=self.address or envs.RAY_CLUSTER.get(), **options)
        except ConnectionError as exc:
            raise StoreError(
                f"--address {self.address}: cannot reach the Ray cluster: {exc}"
            ) from None
        return True

    def _largest_node(self) -> tuple[float, float]:
        """Cores and memory (bytes) of the largest live node."""
        nodes = [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]
        cpus = max((float(r.get("CPU", 0)) for r in nodes), default=1.0)
        memory = max((float(r.get("memory", 0)) for r in nodes), default=0.0)
        return cpus, memory

    def _execute(self, batch: Batch) -> list[UnitResult]:
        """Submit up to ``jobs`` units at once as tasks; the rest wait for a slot.

        Raises:
            Interrupted: SIGINT or SIGTERM; running tasks were cancelled (their engine processes
                ended) before this returns.
            StoreError: the cluster cannot be reached, or a unit's publish hit a store failure
                (raised once every unit has finished, as on local workers).
        """
        with self.session():
            return self._run(self.ray, batch)

    def _run(self, ray: Any, batch: Batch) -> list[UnitResult]:
        units, observer = batch.units, batch.observer
        task = ray.remote(max_retries=TASK_RETRIES)(run_in_task)
        max_cpus, max_memory = self._largest_node()
        shared_work = ray.put(batch.work)
        listener = notices.retry_listener()
        results: list[UnitResult | None] = [None] * len(units)
        outages: list[StoreError | StoreDataInvalid] = []
        pending = list(enumerate(units))
        running: dict[Any, tuple[int, CompileUnit, float]] = {}
        holding: dict[Any, Held] = {}  # what each running task's claim gave (its lease)

        def submit() -> None:
            i, unit = pending.pop(0)
            try:
                held = batch.claim(unit) if batch.claim is not None else None
            except Exception as exc:  # as a local worker: the claim fails its unit
                failed = UnitResult(unit, 0.0, error=str(exc) or type(exc).__name__)
                results[i] = failed
                unit_finished(observer, failed)
                return
            if batch.claim is not None and held is None:
                results[i] = UnitResult(unit, 0.0, held=True)  # another builder is on it
                return
            estimate = batch.estimates[unit.key.digest]
            options: dict[str, Any] = {"num_cpus": min(estimate.cpus, max_cpus)}
            if max_memory:
                options["memory"] = int(min(estimate.memory_gib * GIB, max_memory))
            unit_started(observer, unit, batch.logs.get(unit.key.digest))
            ref = task.options(**options).remote(shared_work, unit, listener)
            running[ref] = (i, unit, time.monotonic())
            if held is not None:
                holding[ref] = held

        def finish(ref: Any) -> None:
            i, unit, start = running.pop(ref)
            if ref in holding:
                holding.pop(ref).release()
            try:
                value, seconds = ray.get(ref)
                result = UnitResult(unit, seconds, value=value)
            except ray.exceptions.RayError as exc:
                cause = getattr(exc, "cause", None) or exc
                if isinstance(cause, StoreError | StoreDataInvalid):
                    outages.append(type(cause)(str(cause)))
                message = str(cause).strip().splitlines()
                result = UnitResult(
                    unit,
                    time.monotonic() - start,
                    error=(message[-1] if message else "") or type(cause).__name__,
                )
            results[i] = result
            unit_finished(observer, result)

        with signals_cancel(ProcessGroups()) as received:
            while pending or running:
                if received:
                    for ref in running:
                        ray.cancel(ref)
                    ray.wait(
                        list(running), num_returns=len(running), timeout=KILL_GRACE_SECONDS + 10
                    )
                    for held in holding.values():
                        held.release()
                    raise Interrupted(received[0])
                while pending and len(running) < max(1, batch.jobs):
                    submit()
                if not running:
                    continue  # every unit submitted was held
                ready, _ = ray.wait(list(running), num_returns=1, timeout=0.2)
                for ref in ready:
                    finish(ref)
        if outages:
            raise outages[0]
        return [r for r in results if r is not None]
