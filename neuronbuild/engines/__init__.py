"""Compile backends. Nothing outside this package asks which engine it holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from neuronbuild.engines.base import Engine

__all__ = ["Engine", "engine_for", "get_engine"]

if TYPE_CHECKING:
    from neuronbuild.recipe import Recipe


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (``cpu`` or ``neuron``). Raises KeyError for another name."""
    from neuronbuild.engines.cpu import CpuEngine
    from neuronbuild.engines.neuron import NeuronEngine

    engines: dict[str, type[Engine]] = {"cpu": CpuEngine, "neuron": NeuronEngine}
    return engines[name]()


def engine_for(recipe: Recipe) -> Engine:
    """The engine that compiles ``recipe`` (derived from its target)."""
    return get_engine(recipe.engine)
