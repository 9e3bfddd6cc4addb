"""Unit keys: sha256 over canonical JSON of named factors that determine a unit's output.

Like sccache's cache key, a :class:`UnitKey` is an explicit structure whose fields are named (so
``plan --explain`` and ``doctor`` can print them one by one) and versioned by :data:`SCHEMA`, bumped
whenever what goes into a key changes. Keys never contain host paths, host names or timestamps:
``plan`` and ``seal`` give the same keys on any machine.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from neuronbuild.digest import canonical_json, hex_of, sha256_digest

__all__ = [
    "SCHEMA",
    "FactorDifference",
    "UnitKey",
    "canonical_json",
    "differing_factors",
    "factor_differences",
    "sha256_digest",
]

SCHEMA = "neuronbuild.unit/3"
"""Schema salt of every unit key; bump it when the factors change meaning."""


@dataclass(frozen=True)
class UnitKey:
    """The named factors of one compile unit and their digest.

    ``factors`` maps a factor name (``schema``, ``engine``, ``target``, ``model``, ``revision``,
    ``engine_args``, ``toolchain``, ``env``, and the engine's own, e.g. ``cpu_isa`` or ``graph``)
    to a JSON value. ``digest`` is ``sha256:<hex>`` of their canonical JSON.
    """

    factors: Mapping[str, Any]

    @cached_property
    def digest(self) -> str:
        return sha256_digest(canonical_json(dict(self.factors)))

    @property
    def hex(self) -> str:
        """The digest without its algorithm prefix, as used in store paths."""
        return hex_of(self.digest)

    def differences(self, other: Mapping[str, Any]) -> list[str]:
        """Names of the factors whose values differ from ``other``'s (a missing one differs)."""
        names = sorted(set(self.factors) | set(other))
        return [n for n in names if self.factors.get(n) != other.get(n)]


def _describe(value: Any) -> str:
    text = json.dumps(value, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


class FactorDifference(NamedTuple):
    """One key factor that differs between a recipe's unit and a stored one: its dotted
    ``name`` (``engine_args.max_num_seqs``; one level deep) and the two values (None when
    absent; ``recipe`` is this command's value, whatever its source)."""

    name: str
    recipe: Any
    manifest: Any

    def __str__(self) -> str:
        """``name: recipe X, manifest Y``, each value as compact JSON (60 characters at most);
        the first label names where this side's value came from (:func:`factor_source`)."""
        mine = f"{factor_source(self.name)} {_describe(self.recipe)}"
        return f"{self.name}: {mine}, manifest {_describe(self.manifest)}"


FACTOR_SOURCES = {
    "env": "environment",
    "installed": "this host",
    "model_files": "model folder",
    "schema": "neuronbuild",
}
"""Where a unit key factor's value comes from when it is not the recipe: the environment the
command was started with (``env``), the distributions installed here (``installed``), the files
of a local model folder (``model_files``) and neuronbuild's own key schema (``schema``)."""


def factor_source(name: str) -> str:
    """The source ``doctor`` labels factor ``name``'s value with (``env.NEURON_CC_FLAGS`` ->
    ``environment``); ``recipe`` for every factor the recipe sets (:data:`FACTOR_SOURCES`)."""
    return FACTOR_SOURCES.get(name.split(".", 1)[0], "recipe")


def differing_factors(mine: dict[str, Any], theirs: dict[str, Any]) -> list[FactorDifference]:
    """Every factor (one level deep) that differs between ``mine`` (a recipe's unit key) and
    ``theirs`` (a stored unit's), by name."""
    out = []
    for name in sorted(set(mine) | set(theirs)):
        a, b = mine.get(name), theirs.get(name)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            for sub in sorted(set(a) | set(b)):
                if a.get(sub) != b.get(sub):
                    out.append(FactorDifference(f"{name}.{sub}", a.get(sub), b.get(sub)))
        else:
            out.append(FactorDifference(name, a, b))
    return out


def factor_differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    """:func:`differing_factors` as lines (``factor[.sub]: recipe X, manifest Y``)."""
    return [str(d) for d in differing_factors(mine, theirs)]


FACTOR_MEANINGS = {
    "schema": "neuronbuild's key schema changed (a newer neuronbuild); compile again",
    "engine": "another engine compiles this target",
    "target": "another target (device family or cpu)",
    "model": "the model string differs; vLLM keys it verbatim, so spell it as at compile",
    "revision": "another hub revision of the model",
    "model_files": "the model folder's content (config, tokenizer, generation config or weight "
    "index) changed under the same path",
    "engine_args": "a keyed engine argument differs after resolving vLLM's defaults",
    "toolchain": "a pinned distribution version differs",
    "installed": "an installed distribution is another build than the one compiled with (its "
    "local version label, or the files it installed: a patched copy); plan where the toolchain is "
    "installed as it was at compile",
    "env": "a keyed environment variable differs from the build's; start the command with the "
    "same value (or unset it)",
    "graph": "another graph (bucket)",
    "phase": "another phase of the run (prefill, decode, vision)",
}
"""Why each unit key factor every engine shares makes a miss, as ``doctor`` explains it (an
engine's own factors: its ``factor_meanings``)."""


def explain_differences(names: Iterable[str], own: Mapping[str, str]) -> list[str]:
    """``factor: why`` once for each top-level factor of the dotted ``names``
    (:class:`FactorDifference`'s), in their order; ``own``: the engine's own factors' meanings
    (``Engine.factor_meanings``)."""
    meanings = {**FACTOR_MEANINGS, **own}
    top = dict.fromkeys(name.split(".", 1)[0] for name in names)
    return [f"{n}: {meanings.get(n, 'an engine factor differs')}" for n in top]
