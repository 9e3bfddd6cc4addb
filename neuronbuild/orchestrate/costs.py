"""What each compile unit is expected to cost: its engine's estimate, replaced by the measured
durations of earlier builds of the same unit shape where the store holds them.

A unit's **shape** is the digest of its key factors without ``schema``, ``toolchain`` and ``env``:
the same model, engine arguments, target and graphs built by another compiler release or with
other compiler flags take about as long, so a new release's build is balanced by the last one's
times. Timings of the units being built now are never used (see :func:`unit_costs`), so every
shard of one build sees the same costs whatever finished before it started.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.engines.base import Engine, UnitEstimate
from neuronbuild.graph import CompileUnit
from neuronbuild.store.cas import Store
from neuronbuild.store.records import UnitTiming

UNSHAPED_FACTORS = frozenset({"schema", "toolchain", "installed", "env"})
"""Key factors that change what a unit compiles into but not how long it takes."""


def unit_shape(unit: CompileUnit) -> str:
    """``sha256:<hex>`` of the unit's key factors without :data:`UNSHAPED_FACTORS`."""
    factors = {k: v for k, v in unit.key.factors.items() if k not in UNSHAPED_FACTORS}
    return sha256_digest(canonical_json(factors))


@dataclass(frozen=True)
class PlannedUnit:
    """One unit of a compile run with the engine that builds it and that engine's estimate."""

    unit: CompileUnit
    engine: Engine

    @property
    def key(self) -> str:
        return self.unit.key.digest

    @property
    def estimate(self) -> UnitEstimate:
        return self.engine.estimate(len(self.unit.graphs))


def measured_costs(units: Sequence[PlannedUnit], store: Store | None) -> dict[str, float]:
    """Seconds per unit key for the units whose shape the store holds timings of: the median of
    those of earlier builds. Timings of any unit key in ``units`` are ignored: they are written
    while this very build runs, and a shard that started later would otherwise balance with
    other costs than one that started earlier, and a unit could fall between shards.

    Raises:
        StoreError: the store cannot be listed or read. StoreDataInvalid: a timing is malformed.
    """
    shapes = {u.key: unit_shape(u.unit) for u in units}
    measured: dict[str, list[float]] = {}
    if store is not None:
        for timing in store.timings(set(shapes.values())):
            if timing.key not in shapes:
                measured.setdefault(timing.shape, []).append(timing.seconds)
    found = {key: shape for key, shape in shapes.items() if shape in measured}
    return {key: statistics.median(measured[shape]) for key, shape in found.items()}


def unit_costs(units: Sequence[PlannedUnit], store: Store | None) -> dict[str, float]:
    """Expected seconds per unit key: :func:`measured_costs` where the store holds timings of
    the unit's shape, else its engine's estimate.

    Raises:
        StoreError: the store cannot be listed or read. StoreDataInvalid: a timing is malformed.
    """
    measured = measured_costs(units, store)
    return {u.key: measured.get(u.key, u.estimate.seconds) for u in units}


def record_timings(store: Store, compiled: Iterable[tuple[CompileUnit, float]]) -> None:
    """Store how long each compiled unit took (``(unit, seconds)`` pairs), for later builds."""
    for unit, seconds in compiled:
        store.put_timing(UnitTiming(unit.key.digest, unit_shape(unit), round(seconds, 3)))
