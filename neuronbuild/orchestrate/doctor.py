"""``neuronbuild doctor`` and ``status RECIPE``: which units of a recipe the store holds, and why
one that "should" hit misses.

For every unit of a recipe's plan: whether the store holds its key, and for a miss, which factors
differ from the same graph's unit in the recipe's last sealed manifest (``<name>/latest``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from neuronbuild.engines.registry import engine_for, machine_labels
from neuronbuild.graph import Graph
from neuronbuild.human import count
from neuronbuild.keys import differing_factors as differing_key_factors
from neuronbuild.keys import explain_differences
from neuronbuild.orchestrate.unit_state import UnitState, diagnose_units, refuse_unreadable
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe
from neuronbuild.store.cas import LATEST, Store
from neuronbuild.store.records import UnitRecord


@dataclass
class UnitDiagnosis:
    """One unit: its key, graphs, factors, whether it is cached (its record and every blob
    present), the differing factors, and why each makes a miss (``explanations``)."""

    key: str
    graphs: list[dict[str, Any]]
    factors: dict[str, Any]
    cached: bool
    differences: list[str] = field(default_factory=list)
    compared_with: str | None = None
    explanations: list[str] = field(default_factory=list)
    differing: list[str] = field(default_factory=list)
    """The names of the factors ``differences`` describes, in its order (not in the JSON)."""
    state: str = ""
    """Its :class:`~neuronbuild.orchestrate.unit_state.UnitState` value (what ``verify`` and
    ``status`` say of the same unit); unset: cached, or no record."""
    problems: list[str] = field(default_factory=list)
    """What the store lacks for it, one line per object with its URL (empty when cached)."""
    sealed_in: str | None = None
    """``<name>/latest (sha256:...)`` when the last sealed build names this very unit."""

    def __post_init__(self) -> None:
        if not self.state:
            self.state = (UnitState.CACHED if self.cached else UnitState.NO_RECORD).value

    def to_json(self) -> dict[str, Any]:
        """One unit of ``doctor --json`` (``neuronbuild/schemas/doctor.json``)."""
        data = asdict(self)
        del data["differing"]
        return data


def differing_factors(unit: UnitDiagnosis) -> list[str]:
    """The factors (``engine_args.max_num_seqs``) that differ for a missing unit, in order."""
    return unit.differing


def summary(units: list[UnitDiagnosis]) -> str:
    """One line: how many units the store holds, and for the misses the factors that differ
    from the last sealed build, most frequent first (``3 of 5 units cached, 2 missing: factor
    engine_args.max_num_seqs differs from tiny/latest (sha256:...)``)."""
    cached = sum(u.cached for u in units)
    line = f"{cached} of {count(len(units), 'unit')} cached"
    misses = [u for u in units if not u.cached]
    if not misses:
        return line
    counts = Counter(f for u in misses for f in differing_factors(u))
    parts = []
    if counts:
        names = ", ".join(name for name, _ in counts.most_common())
        which = "factor" if len(counts) == 1 else "factors"
        verb = "differs" if len(counts) == 1 else "differ"
        compared = next(u.compared_with for u in misses if u.compared_with)
        parts.append(f"{which} {names} {verb} from {compared}")
    damaged = Counter(u.state for u in misses if u.sealed_in or u.state != UnitState.NO_RECORD)
    for state, n in damaged.items():
        them = "it" if n == 1 else "them"
        parts.append(f"{n} with {STATE_TEXT[UnitState(state)]} (compile {them} again)")
    unmatched = sum(
        not u.differences and not u.sealed_in and u.state == UnitState.NO_RECORD for u in misses
    )
    if unmatched:
        them = "it" if unmatched == 1 else "them"
        parts.append(f"{unmatched} with no sealed build to compare with (compile {them})")
    return f"{line}, {len(misses)} missing: {'; '.join(parts)}"


STATE_TEXT = {
    UnitState.NO_RECORD: "its unit record missing though the sealed build names it",
    UnitState.RECORD_UNREADABLE: "an unreadable unit record",
    UnitState.BLOB_MISSING: "a blob missing or truncated",
    UnitState.BLOB_CORRUPT: "a corrupt blob",
}
"""How doctor's summary names a missing unit's state, beyond a factor that differs."""


def recipe_status(recipe: Recipe, store: Store) -> dict[str, Any]:
    """Where ``<name>/latest`` points, cached/missing graph counts per kind, the missing graphs
    and each unit's state by key, as ``doctor`` and ``verify`` give it (``status --json``'s
    ``recipe``)."""
    kinds: dict[str, dict[str, int]] = {}
    missing: list[dict[str, Any]] = []
    states: dict[str, str] = {}
    for unit in diagnose(recipe, store):
        states[unit.key] = unit.state
        state = "cached" if unit.cached else "missing"
        for graph in unit.graphs:
            kinds.setdefault(graph["kind"], {"cached": 0, "missing": 0})[state] += 1
            if not unit.cached:
                missing.append(graph)
    return {
        "name": recipe.name,
        "latest": store.get_ref(recipe.name, LATEST),
        "n_graphs_by_kind": kinds,
        "missing_graphs": missing,
        "unit_states": states,
    }


def diagnose(recipe: Recipe, store: Store) -> list[UnitDiagnosis]:
    """Diagnose every unit of ``recipe`` against ``store`` (see the module docstring)."""
    plan = build_plan(recipe)
    latest = store.get_ref(recipe.name, LATEST)
    if latest is not None and plan.units:  # an index: its build for this recipe's labels
        latest = store.build_for(latest, machine_labels(plan.units[0].key.factors))
    held = store.get_manifest(latest).units if latest is not None else ()
    sealed: dict[tuple[tuple[str, tuple[tuple[str, int], ...]], ...], UnitRecord] = {}
    for record in held:
        sealed[_identity(record.graphs)] = record
    compared_with = f"{recipe.name}/{LATEST} ({latest})"
    health = diagnose_units(
        store,
        [u.key.digest for u in plan.units],
        sealed={r.key: r for r in held},
        sealed_in=compared_with,
    )
    refuse_unreadable(health)  # bad data is reported, never taken for a miss
    out = []
    for unit in plan.units:
        graphs = [g.to_json() for g in unit.graphs]
        held_unit = health[unit.key.digest]
        diagnosis = UnitDiagnosis(
            unit.key.digest,
            graphs,
            dict(unit.key.factors),
            held_unit.cached,
            state=held_unit.state.value,
            problems=list(held_unit.problems),
            sealed_in=held_unit.sealed_in,
        )
        previous = sealed.get(_identity(unit.graphs))
        if not diagnosis.cached and previous is not None and previous.key != unit.key.digest:
            diagnosis.compared_with = compared_with
            found = differing_key_factors(diagnosis.factors, previous.factors)
            diagnosis.differences = [str(d) for d in found]  # formatted once, here
            diagnosis.differing = [d.name for d in found]
            diagnosis.explanations = explain_differences(
                diagnosis.differing, engine_for(recipe).factor_meanings
            )
        out.append(diagnosis)
    return out


def _identity(graphs: tuple[Graph, ...]) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    return tuple(g.identity for g in graphs)
