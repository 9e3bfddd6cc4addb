"""Expand a recipe into its plan: every graph, grouped into compile units with their keys."""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from neuronbuild.engines import Engine, engine_for
from neuronbuild.graph import CompileUnit, Graph
from neuronbuild.keys import SCHEMA, UnitKey
from neuronbuild.recipe import Recipe

__all__ = ["CompileUnit", "Plan", "build_plan"]


@dataclass(frozen=True)
class Plan:
    """A recipe's units in compile order. ``graphs`` flattens them (no graph appears twice)."""

    recipe: Recipe
    engine: Engine
    units: tuple[CompileUnit, ...]

    @property
    def graphs(self) -> list[Graph]:
        return [g for unit in self.units for g in unit.graphs]

    def totals(self) -> dict[str, int]:
        """Number of graphs per kind, in first-seen order."""
        return dict(Counter(g.kind for g in self.graphs))

    def to_json(self, held: set[str] | None = None) -> dict[str, Any]:
        """The plan as ``plan --json`` prints it. ``held``: unit keys the store holds, if asked."""
        units = []
        for unit in self.units:
            entry: dict[str, Any] = {
                "key": unit.key.digest,
                "graphs": [g.to_json() for g in unit.graphs],
                "factors": dict(unit.key.factors),
            }
            if held is not None:
                entry["cached"] = unit.key.digest in held
            units.append(entry)
        return {
            "name": self.recipe.name,
            "target": self.recipe.target,
            "engine": self.engine.name,
            "graphs": [g.to_json() for g in self.graphs],
            "totals": self.totals(),
            "units": units,
        }


def build_plan(recipe: Recipe) -> Plan:
    """Plan a valid recipe: the engine's units, each keyed by :data:`~neuronbuild.keys.SCHEMA`,
    engine, target, model, revision, engine args, toolchain pins, allow-listed environment and the
    engine's own factors. The environment is read now, so a plan made under ``NEURON_CC_FLAGS``
    differs from one made without it."""
    engine = engine_for(recipe)
    base: dict[str, Any] = {
        "schema": SCHEMA,
        "engine": engine.name,
        "target": recipe.target,
        "model": recipe.model,
        "revision": recipe.engine_args.get("revision"),
        "engine_args": engine.key_engine_args(recipe),
        "toolchain": dict(recipe.toolchain),
        "env": engine.key_env_values(os.environ),
    }
    units = tuple(
        CompileUnit(spec.graphs, UnitKey({**base, **spec.factors})) for spec in engine.units(recipe)
    )
    return Plan(recipe, engine, units)
