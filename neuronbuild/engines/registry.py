"""Every engine by name: one table of name -> import path -> install hint -> targets -> recipe
fields, read lazily (as fsspec's ``registry.py`` finds its file systems), so a third engine is one
folder and one row, and a command imports only the engine it uses."""

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
    """Where engine ``name``'s class lives (``path``: ``module:Class``), what to install when
    that module cannot be imported (``install``, appended to the error), the recipe ``target``
    values it compiles for (``targets``), and the recipe keys it owns (``fields``, e.g. the CPU
    engine's ``cpu_isa``): each is also a unit factor naming the machine the artifacts run on,
    which a node may differ in (``serve --allow-mismatch NAME``), and a recipe of another engine
    may not set it. Read without importing the engine (recipe checks, ``--help``)."""

    path: str
    install: str
    targets: tuple[str, ...]
    fields: tuple[str, ...] = ()


SHIPPED = "it ships with neuronbuild: reinstall neuronbuild (make install)"

ENGINES: dict[str, EngineRow] = {
    "cpu": EngineRow(
        "neuronbuild.engines.vllm_cpu.engine:CpuEngine", SHIPPED, ("cpu",), ("cpu_isa",)
    ),
    "neuron": EngineRow(
        "neuronbuild.engines.neuron.engine:NeuronEngine", SHIPPED, ("trn1", "trn2", "trn3", "inf2")
    ),
}
"""Every engine, by the name a recipe's target resolves to (:func:`target_engines`)."""


def engine_names() -> tuple[str, ...]:
    """Every engine's name, in :data:`ENGINES` order."""
    return tuple(ENGINES)


def target_engines() -> dict[str, str]:
    """Each recipe ``target`` and the engine that compiles for it (DESIGN.md, "Vocabulary"), in
    :data:`ENGINES` order."""
    return {target: name for name, row in ENGINES.items() for target in row.targets}


def engine_fields() -> dict[str, str]:
    """Each recipe key an engine owns (:attr:`EngineRow.fields`) and that engine's name."""
    return {key: name for name, row in ENGINES.items() for key in row.fields}


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
        for name, engine in ((name, get_engine(name)) for name in engine_names())
    }
