"""``neuronbuild doctor`` and ``status RECIPE``: which units of a recipe the store holds, and why
one that "should" hit misses.

For every unit of a recipe's plan: whether the store holds its key, and for a miss, which factors
differ from the same graph's unit in the recipe's last sealed manifest (``<name>/latest``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from neuronbuild.graph import Graph
from neuronbuild.keys import explain_differences, factor_differences
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


def recipe_status(recipe: Recipe, store: Store) -> dict[str, Any]:
    """Where ``<name>/latest`` points, cached/missing graph counts per kind, the missing graphs
    (``status --json``'s ``recipe``)."""
    kinds: dict[str, dict[str, int]] = {}
    missing: list[dict[str, Any]] = []
    for unit in diagnose(recipe, store):
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
    }


def diagnose(recipe: Recipe, store: Store) -> list[UnitDiagnosis]:
    """Diagnose every unit of ``recipe`` against ``store`` (see the module docstring)."""
    plan = build_plan(recipe)
    held = store.built_units(u.key.digest for u in plan.units)
    latest = store.get_ref(recipe.name, LATEST)
    sealed: dict[tuple[tuple[str, tuple[tuple[str, int], ...]], ...], UnitRecord] = {}
    if latest is not None:
        for record in store.get_manifest(latest).units:
            sealed[_identity(record.graphs)] = record
    out = []
    for unit in plan.units:
        graphs = [g.to_json() for g in unit.graphs]
        diagnosis = UnitDiagnosis(
            unit.key.digest, graphs, dict(unit.key.factors), unit.key.digest in held
        )
        previous = sealed.get(_identity(unit.graphs))
        if not diagnosis.cached and previous is not None:
            diagnosis.compared_with = f"{recipe.name}/{LATEST} ({latest})"
            diagnosis.differences = factor_differences(diagnosis.factors, previous.factors)
            diagnosis.explanations = explain_differences(diagnosis.differences)
        out.append(diagnosis)
    return out


def _identity(graphs: tuple[Graph, ...]) -> tuple[tuple[str, tuple[tuple[str, int], ...]], ...]:
    return tuple(g.identity for g in graphs)
