"""Every engine by name: one table of name -> import path -> install hint, read lazily (as
fsspec's ``registry.py`` finds its file systems), so a third engine is one row and a command
imports only the engine it uses."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from neuronbuild.errors import UserError

if TYPE_CHECKING:
    from neuronbuild.engines.base import Engine
    from neuronbuild.recipe import Recipe


@dataclass(frozen=True)
class EngineRow:
    """Where engine ``name``'s class lives (``path``: ``module:Class``) and what to install when
    that module cannot be imported (``install``, appended to the error)."""

    path: str
    install: str


SHIPPED = "it ships with neuronbuild: reinstall neuronbuild (make install)"

ENGINES: dict[str, EngineRow] = {
    "cpu": EngineRow("neuronbuild.engines.vllm_cpu.engine:CpuEngine", SHIPPED),
    "neuron": EngineRow("neuronbuild.engines.neuron.engine:NeuronEngine", SHIPPED),
}
"""Every engine, by the name a recipe's target resolves to (``recipe.TARGET_ENGINES``)."""

ENGINE_NAMES = tuple(ENGINES)


def get_engine(name: str) -> Engine:
    """The engine called ``name`` (a key of :data:`ENGINES`), its module imported on first use.

    Raises:
        KeyError: no engine has that name.
        UserError: its module cannot be imported (the row's install hint says what to do).
    """
    row = ENGINES[name]
    module, _, cls = row.path.partition(":")
    try:
        found: type[Engine] = getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise UserError(f"engine {name}: cannot import {module} ({exc}); {row.install}") from None
    return found()


def engine_for(recipe: Recipe) -> Engine:
    """The engine that compiles ``recipe`` (derived from its target)."""
    return get_engine(recipe.engine)


def installed_toolchains() -> dict[str, dict[str, str | None]]:
    """Per engine name (in :data:`ENGINES` order), each distribution of its required and observed
    toolchain (for neuron, the runtime distributions whichever the release compiles through) and
    the version installed here (None when it is not installed), as ``--version`` prints
    them."""
    from neuronbuild.engines.compiler import UnitCompiler  # the compile half: not for serve

    return {
        name: UnitCompiler.installed_versions(
            list(dict.fromkeys([*engine.required_toolchain, *engine.observed_toolchain]))
        )
        for name, engine in ((name, get_engine(name)) for name in ENGINE_NAMES)
    }
