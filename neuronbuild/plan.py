"""Expand a recipe into its plan: every graph, grouped into compile units with their keys."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuronbuild import start_env
from neuronbuild.engines.base import Engine
from neuronbuild.engines.registry import engine_for
from neuronbuild.engines.versions import installed_builds
from neuronbuild.graph import CompileUnit, Graph
from neuronbuild.keys import SCHEMA, UnitKey
from neuronbuild.model_files import content_digest, local_folder
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

    def to_json(self, cached: set[str] | None = None) -> dict[str, Any]:
        """The plan as ``plan --json`` prints it (``neuronbuild/schemas/plan.json``).
        ``cached``: unit keys the store holds with every blob, if asked (else each unit's
        ``cached`` is null)."""
        units = [
            {
                "key": unit.key.digest,
                "label": unit.label(),
                "cached": None if cached is None else unit.key.digest in cached,
                "graphs": [g.to_json() for g in unit.graphs],
                "factors": dict(unit.key.factors),
            }
            for unit in self.units
        ]
        return {
            "name": self.recipe.name,
            "target": self.recipe.target,
            "engine": self.engine.name,
            "n_graphs": len(self.graphs),
            "n_units": len(self.units),
            "n_graphs_by_kind": self.totals(),
            "graphs": [g.to_json() for g in self.graphs],
            "units": units,
        }


def build_plan(recipe: Recipe, environ: Mapping[str, str] | None = None) -> Plan:
    """Plan a valid recipe: the engine's units, each keyed by :data:`~neuronbuild.keys.SCHEMA`,
    engine, target, model, revision, the model folder's content (``model_files``, when ``model``
    is a local folder), the resolved keyed engine args, toolchain pins, the build of each pinned
    (or engine-observed) distribution installed here (``installed``: full version with its local
    label and a digest of its ``RECORD``, :func:`~neuronbuild.engines.versions.installed_builds`,
    so two local builds of one version, or a patched copy, get other keys), the keyed environment
    (normalised for the target) and the engine's own factors.

    ``environ`` is the environment keys are read from: by default the one the user started the
    command with (:func:`neuronbuild.start_env.environ`), so a plan made under
    ``NEURON_CC_FLAGS`` differs from one made without it, and no variable this process set
    itself (Inductor's ``TORCHINDUCTOR_CACHE_DIR``) can enter a key."""
    engine = engine_for(recipe)
    base: dict[str, Any] = {
        "schema": SCHEMA,
        "engine": engine.name,
        "target": recipe.target,
        "model": recipe.model,
        "revision": recipe.engine_args.get("revision"),
        "engine_args": engine.key_engine_args(recipe),
        "toolchain": dict(recipe.toolchain),
        "installed": installed_builds({*recipe.toolchain, *engine.observed_toolchain}),
        "env": engine.key_env_values(
            start_env.environ() if environ is None else environ, recipe.target, recipe.toolchain
        ),
    }
    folder = local_folder(recipe.model, recipe.workdir)
    if folder is not None:
        base["model_files"] = content_digest(folder)
    units = tuple(
        CompileUnit(spec.graphs, UnitKey({**base, **spec.factors})) for spec in engine.units(recipe)
    )
    return Plan(recipe, engine, units)
