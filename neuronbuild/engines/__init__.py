"""Compile backends. Nothing outside this package asks which engine it holds."""

from __future__ import annotations

from typing import TYPE_CHECKING

from neuronbuild.engines.base import Engine

__all__ = ["Engine", "engine_for", "get_engine", "installed_toolchains"]

if TYPE_CHECKING:
    from neuronbuild.recipe import Recipe

ENGINE_NAMES = ("cpu", "neuron")
"""Every engine, by the name a recipe's target resolves to (``recipe.TARGET_ENGINES``)."""


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (``cpu`` or ``neuron``). Raises KeyError for another name."""
    from neuronbuild.engines.cpu import CpuEngine
    from neuronbuild.engines.neuron import NeuronEngine

    engines: dict[str, type[Engine]] = {"cpu": CpuEngine, "neuron": NeuronEngine}
    return engines[name]()


def engine_for(recipe: Recipe) -> Engine:
    """The engine that compiles ``recipe`` (derived from its target)."""
    return get_engine(recipe.engine)


def installed_toolchains() -> dict[str, dict[str, str | None]]:
    """Per engine name (sorted), each distribution of its required toolchain and the version
    installed here (None when it is not installed), as ``--version`` prints them."""
    from neuronbuild.engines.compiler import UnitCompiler

    return {
        name: UnitCompiler.installed_versions(list(get_engine(name).required_toolchain))
        for name in ENGINE_NAMES
    }
