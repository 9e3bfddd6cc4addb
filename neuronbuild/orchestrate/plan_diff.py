"""``plan NEW --diff OLD``: which graphs a change of recipe (a new SDK release, a new bucket, a
flag) makes compile again, and what that costs, before anything is compiled (issue 44 item 3).

A unit of NEW whose key OLD also plans is reused; every other unit compiles. Its cost is the median
of the compile times the store recorded for units of its shape (:mod:`.costs`: the same model,
arguments and graphs under any toolchain, so a release upgrade is priced by the last release's
measured times), else its engine's estimate; its peak memory is the engine's estimate (the store
records times, not memory). Where OLD's build seeds the unit (:data:`~.seeds.SAME`: the same
engine, target, toolchain and phase: vLLM-Neuron's per-graph cache check then reuses each graph
whose own key holds), only the graphs OLD does not plan are priced, at the unit's time per graph;
the others are counted as seeded. Each changed unit is matched with the unit of OLD it replaces
(the same shape, else the same phase) to name the key factors that differ (an upgrade:
``toolchain`` and ``installed``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from neuronbuild.digest import canonical_json
from neuronbuild.graph import CompileUnit
from neuronbuild.orchestrate.costs import PlannedUnit, measured_costs, unit_shape
from neuronbuild.orchestrate.seeds import SAME
from neuronbuild.plan import Plan
from neuronbuild.store.cas import Store


@dataclass(frozen=True)
class ChangedUnit:
    """A unit NEW compiles and OLD does not plan: its ``unit``, the expected ``seconds`` and
    whether they were ``recorded`` (measured in earlier builds of its shape) or estimated,
    its ``memory_gib`` (peak host memory, GiB, the engine's estimate), ``why``: the key
    factors that differ from the unit of OLD it replaces (empty when OLD has none), and how
    many of its graphs OLD's build ``seeded`` (not priced)."""

    unit: CompileUnit
    seconds: float
    recorded: bool
    memory_gib: float
    why: tuple[str, ...]
    seeded: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.unit.key.digest,
            "label": self.unit.label(),
            "graphs": [g.to_json() for g in self.unit.graphs],
            "n_graphs_seeded": self.seeded,
            "seconds": round(self.seconds, 3),
            "recorded": self.recorded,
            "memory_gib": self.memory_gib,
            "why": list(self.why),
        }


@dataclass(frozen=True)
class PlanDiff:
    """What NEW costs over OLD: the ``changed`` units (in NEW's order), how many graphs NEW
    ``reused`` from OLD, and the ``dropped`` graphs OLD plans and NEW does not."""

    changed: tuple[ChangedUnit, ...]
    reused: int
    dropped: int

    @property
    def graphs(self) -> int:
        """Graphs that compile (seeded ones not counted)."""
        return sum(len(c.unit.graphs) - c.seeded for c in self.changed)

    @property
    def seconds(self) -> float:
        """Compile time of every changed unit one after another (seconds)."""
        return sum(c.seconds for c in self.changed)

    @property
    def peak_memory_gib(self) -> float:
        """The most host memory one changed unit needs (GiB; 0 when none changes)."""
        return max((c.memory_gib for c in self.changed), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "n_graphs_changed": self.graphs,
            "n_graphs_reused": self.reused,
            "n_graphs_seeded": sum(c.seeded for c in self.changed),
            "n_graphs_dropped": self.dropped,
            "seconds": round(self.seconds, 3),
            "peak_memory_gib": self.peak_memory_gib,
            "units": [c.to_json() for c in self.changed],
        }


def _differing(new: CompileUnit, old: CompileUnit | None) -> tuple[str, ...]:
    if old is None:
        return ()
    a, b = new.key.factors, old.key.factors
    return tuple(
        sorted(k for k in set(a) | set(b) if canonical_json(a.get(k)) != canonical_json(b.get(k)))
    )


def _same(unit: CompileUnit, names: tuple[str, ...]) -> str:
    return canonical_json({k: unit.key.factors.get(k) for k in names}).decode()


def diff_plans(new: Plan, old: Plan, store: Store | None) -> PlanDiff:
    """What compiling ``new`` costs where ``old`` was built (module docstring); ``store``: where
    the recorded compile times are (None: the engines' estimates alone).

    Raises:
        StoreError: the store cannot be listed or read. StoreDataInvalid: a timing is malformed.
    """
    old_keys = {u.key.digest for u in old.units}
    old_graphs = {g for u in old.units for g in u.graphs}
    by_shape = {unit_shape(u): u for u in old.units}
    by_phase = {u.phase: u for u in old.units}
    seeds = {_same(u, SAME) for u in old.units}
    todo = [PlannedUnit(u, new.engine) for u in new.units if u.key.digest not in old_keys]
    measured = measured_costs(todo, store)
    changed = []
    for p in todo:
        graphs = p.unit.graphs
        seeded = sum(g in old_graphs for g in graphs) if _same(p.unit, SAME) in seeds else 0
        seconds = measured.get(p.key, p.estimate.seconds) * (len(graphs) - seeded) / len(graphs)
        counterpart = by_shape.get(unit_shape(p.unit)) or by_phase.get(p.unit.phase)
        why = _differing(p.unit, counterpart)
        changed.append(
            ChangedUnit(p.unit, seconds, p.key in measured, p.estimate.memory_gib, why, seeded)
        )
    new_graphs = {g for u in new.units for g in u.graphs}
    reused = sum(len(u.graphs) for u in new.units if u.key.digest in old_keys)
    return PlanDiff(tuple(changed), reused, len(old_graphs - new_graphs))
