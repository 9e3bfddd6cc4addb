"""What ``compile`` did, as typed values: one :class:`UnitOutcome` per unit of each recipe, one
:class:`CompileReport` per recipe, one :class:`RunReport` per run; ``to_json`` gives
``compile --json``'s shape (``neuronbuild/schemas/compile.json``), and the command line prints
their fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from neuronbuild.errors import UserError
from neuronbuild.graph import CompileUnit
from neuronbuild.orchestrate.shard import Shard

STATUSES = ("cached", "compiled", "failed", "missing", "skipped", "adopted")
"""A unit's status: the store held it, this run compiled it, it failed, a dry run would compile
it, another shard owns it (``skipped`` is counted only in a shard's report), another builder
compiled it while this run waited for it (``adopted``, reused as ``cached`` is: counted only
when some unit has it)."""

COUNTED = ("cached", "compiled", "failed", "missing")
"""The statuses a report's totals always count, zeros included."""


@dataclass(frozen=True)
class UnitFailure:
    """Where a unit's engine failed, as its engine read the log: ``phase`` (None: one-phase
    engines), the failing ``bucket`` and error ``code`` and one-line ``reason`` where the log names
    them, the ``log`` file (a path on the machine that ran the unit) and ``engine_error``, the
    engine's own last error line in it (:func:`neuronbuild.ui.logtail.error_line`). None: not
    known."""

    phase: str | None = None
    log: str | None = None
    bucket: str | None = None
    code: str | int | None = None
    reason: str | None = None
    engine_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The known fields, in ``compile --json``'s order."""
        fields = {
            "phase": self.phase,
            "log": self.log,
            "bucket": self.bucket,
            "code": self.code,
            "reason": self.reason,
            "engine_error": self.engine_error,
        }
        return {k: v for k, v in fields.items() if v is not None}


@dataclass(frozen=True)
class EntryCounts:
    """A compiled unit's cache entries (folders under its engine's ``cache_dir``): compiled by
    this run, and reused from the previous build (:func:`.compile.seed_scratch`)."""

    compiled: int
    reused: int


@dataclass(frozen=True)
class UnitOutcome:
    """One unit of one recipe in a compile run: its ``status`` (:data:`STATUSES`), the
    ``shard`` owning it (sharded runs only), and for a unit this run ran, its own ``seconds``;
    compiled: its ``entries``; failed: the ``error`` line and what is known of the ``failure``."""

    unit: CompileUnit
    status: str
    shard: int | None = None
    seconds: float | None = None
    entries: EntryCounts | None = None
    error: str | None = None
    failure: UnitFailure | None = None

    @property
    def key(self) -> str:
        """The unit's key, ``sha256:<hex>``."""
        return self.unit.key.digest

    @property
    def label(self) -> str:
        """The unit's human label (e.g. ``decode batch=4``)."""
        return self.unit.label()

    @property
    def log(self) -> str | None:
        """A failed unit's log file, where known."""
        return self.failure.log if self.failure is not None else None

    def to_json(self) -> dict[str, Any]:
        """One unit of ``compile --json``."""
        data: dict[str, Any] = {
            "key": self.key,
            "label": self.label,
            "graphs": [g.to_json() for g in self.unit.graphs],
            "status": self.status,
        }
        if self.shard is not None:
            data["shard"] = self.shard
        if self.seconds is not None:
            data["seconds"] = round(self.seconds, 1)
        if self.entries is not None:
            data["n_entries_by_origin"] = {
                "compiled": self.entries.compiled,
                "reused": self.entries.reused,
            }
        if self.error is not None:
            data["error"] = self.error
        if self.failure is not None:
            data.update(self.failure.to_json())
        return data


@dataclass
class CompileReport:
    """What ``compile`` did for one recipe: one outcome per unit of its plan, in plan order; the
    ``manifest`` sealed and the ``ref`` moved (None: not sealed) from ``previous`` (None: a
    new ref, or not sealed); ``weights``: what the manifest records of the model's weights
    (:func:`~neuronbuild.node.weights.weights_summary`; None: none, or not sealed); ``index``:
    the index the ref moved to, which holds the manifest (None: the ref names the manifest);
    ``blocked``: why compiling here would be refused (dry run); ``sharded``: a shard's report
    (its totals count ``skipped``)."""

    name: str
    units: list[UnitOutcome] = field(default_factory=list)
    manifest: str | None = None
    ref: str | None = None
    previous: str | None = None
    weights: dict[str, int] | None = None
    index: str | None = None
    seconds: float = 0.0
    blocked: str | None = None
    sharded: bool = False

    @property
    def statuses(self) -> tuple[str, ...]:
        """The statuses its totals count: :data:`COUNTED`, ``skipped`` in a shard's report, and
        any other status some unit has."""
        always = COUNTED + (("skipped",) if self.sharded else ())
        return tuple(s for s in STATUSES if s in always or self.count(s))

    @property
    def failed(self) -> int:
        """Units that failed."""
        return self.count("failed")

    def count(self, status: str) -> int:
        """Units of ``status``."""
        return sum(u.status == status for u in self.units)

    def by_status(self) -> dict[str, int]:
        """Units per counted status (:attr:`statuses`), in that order."""
        return {s: self.count(s) for s in self.statuses}

    def to_json(self) -> dict[str, Any]:
        """One recipe of ``compile --json`` (``neuronbuild/schemas/compile.json``)."""
        return {
            "name": self.name,
            "manifest": self.manifest,
            "ref": self.ref,
            "previous": self.previous,
            "index": self.index,
            "weights": self.weights,
            "seconds": round(self.seconds, 3),
            "blocked": self.blocked,
            "n_units": len(self.units),
            "n_units_by_status": self.by_status(),
            "units": [u.to_json() for u in self.units],
        }


@dataclass
class RunReport:
    """What one ``compile`` run did: one :class:`CompileReport` per recipe; with ``shard``, the
    number of distinct units in the run (``units``) and of those this shard owns (``assigned``);
    ``seconds`` of wall time; ``refused``: the ref move the seal refused (nothing moved) when
    units of another recipe failed too, so that neither hides the other."""

    recipes: list[CompileReport]
    shard: Shard | None = None
    units: int = 0
    assigned: int = 0
    seconds: float = 0.0
    refused: UserError | None = None

    @property
    def failed(self) -> int:
        """Failed units, over every recipe."""
        return sum(r.failed for r in self.recipes)

    def to_json(self) -> dict[str, Any]:
        """``compile --json`` less its ``store`` (``neuronbuild/schemas/compile.json``)."""
        return {
            "shard": None if self.shard is None else str(self.shard),
            "n_units": self.units,
            "n_assigned": self.assigned,
            "seconds": round(self.seconds, 3),
            "recipes": [r.to_json() for r in self.recipes],
            "refused": None if self.refused is None else str(self.refused),
        }
