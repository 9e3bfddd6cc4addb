"""Check, before vLLM starts, that this node can run a manifest's artifacts as they were built.

A node differs from the build when an installed distribution differs from the recipe's toolchain
pins, when the engine's target check fails (the Neuron device family, the CPU instruction set),
or when a local model folder's content differs from what was compiled. Each difference is named
(a distribution, ``target``, an engine's own key such as ``cpu_isa``, ``model_files``) so an
operator who knows better can
pass ``--allow-mismatch NAME``; any other difference is refused with a table (exit 2). Variables
that would make a node compile are refused outright.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronbuild.digest import short
from neuronbuild.engines.base import Engine
from neuronbuild.engines.registry import engine_fields
from neuronbuild.engines.versions import installed_build, installed_version, pin_matches
from neuronbuild.errors import UserError, did_you_mean
from neuronbuild.human import format_table
from neuronbuild.model_files import content_digest, local_folder
from neuronbuild.recipe import Recipe

NOT_INSTALLED = "(not installed)"
"""What the node check's table says of a distribution this node lacks."""


def mismatch_names() -> tuple[str, ...]:
    """What ``--allow-mismatch`` takes besides the recipe's pinned distributions (module
    docstring): ``target``, every engine's own recipe keys (the registry rows' ``fields``, each
    a unit factor naming the machine: ``cpu_isa``), ``model_files``, ``weights`` (checked by
    :mod:`.serve_checks`)."""
    return ("target", *engine_fields(), "model_files", "weights")


@dataclass(frozen=True)
class Mismatch:
    """One way this node differs from the build: ``name`` (what ``--allow-mismatch`` takes),
    what the artifacts were built for, and what this node has."""

    name: str
    built_for: str
    node: str


class NodeMismatch(UserError):
    """This node cannot run the artifacts as built; the message is a table of the differences."""


def installed_differences(built: Any, skip: set[str]) -> list[Mismatch]:
    """The distributions of ``built`` (but ``skip``) whose build here differs from the one the unit
    was compiled with (``built``: its ``installed`` factor, distribution -> full version and
    RECORD digest, :func:`~neuronbuild.engines.versions.installed_build`): another local label,
    or a patched copy with the same version. A unit sealed without the factor is not compared."""
    if not isinstance(built, dict):
        return []
    out = []
    for dist in sorted(set(built) - skip):
        here = installed_build(dist)
        if built[dist] != here:
            out.append(Mismatch(dist, _build_text(built[dist]), _build_text(here)))
    return out


def _build_text(build: Any) -> str:
    """An installed build as a table cell: its version and the short RECORD digest."""
    if not isinstance(build, str):
        return NOT_INSTALLED
    version, _, digest = build.partition(" ")
    return f"{version} {short(digest)}" if digest else version


def node_mismatches(
    recipe: Recipe, engine: Engine, factors: Mapping[str, Any], workdir: Path
) -> list[Mismatch]:
    """Every difference between this node and the build of a unit with ``factors``: toolchain
    pins against installed versions (:func:`~neuronbuild.engines.versions.pin_matches`), the
    installed builds against the unit's (:func:`installed_differences`), the engine's own checks
    (:meth:`Engine.node_differences`) and the model folder's content (when ``model`` is a local
    folder)."""
    found = [
        Mismatch(dist, pin, installed or NOT_INSTALLED)
        for dist, pin in sorted(recipe.toolchain.items())
        if not pin_matches(pin, installed := installed_version(dist))
    ]
    found += installed_differences(factors.get("installed"), {m.name for m in found})
    found += [Mismatch(*d) for d in engine.node_differences(dict(factors))]
    folder = local_folder(recipe.model, workdir)
    built = factors.get("model_files")
    if folder is not None and isinstance(built, dict):
        here = content_digest(folder)
        for name in sorted(set(built) | set(here)):
            if built.get(name) != here.get(name):
                found.append(
                    Mismatch(
                        "model_files",
                        f"{name} {built.get(name, '(absent)')}"[:60],
                        str(here.get(name, "(absent)"))[:60],
                    )
                )
    return found


def check_node(
    recipe: Recipe,
    engine: Engine,
    units: Iterable[Mapping[str, Any]],
    workdir: Path,
    environ: Mapping[str, str],
    allow: Iterable[str] = (),
) -> list[Mismatch]:
    """Refuse this node unless it runs the build (the factors of its ``units``) as built;
    return the allowed mismatches, each once (the caller prints them loudly). ``workdir``: where
    a relative model folder resolves.

    Raises:
        UserError: a variable of ``environ`` would make this node compile or mis-target, or
            ``allow`` names something that cannot differ (with a did-you-mean).
        NodeMismatch: a difference not named in ``allow``, with a table of every difference.
    """
    refused = engine.refused_at_serve(environ)
    if refused:
        raise UserError(
            f"{', '.join(refused)} would make this node compile or build for another target "
            f"instead of loading the prebuilt artifacts; unset {' '.join(refused)} and serve again"
        )
    allowed = set(allow)
    known = {
        *recipe.toolchain,
        *engine.observed_toolchain,
        *engine.system_components,
        *mismatch_names(),
    }
    for name in sorted(allowed - known):
        close = did_you_mean(name, known)
        hint = f"did you mean {close}? " if close else ""
        raise UserError(
            f"--allow-mismatch {name}: no such difference; {hint}it takes one of "
            f"{', '.join(sorted(known))}"
        )
    found = list(
        dict.fromkeys(m for f in units for m in node_mismatches(recipe, engine, f, workdir))
    )
    # A distribution this node lacks is installed, not allowed: vLLM would start without it.
    fixed = mismatch_names()
    absent = {m.name for m in found if m.node == NOT_INSTALLED and m.name not in fixed}
    refusing = [m for m in found if m.name not in allowed]
    if refusing:
        rows = [["NAME", "BUILT FOR", "THIS NODE"]] + [[m.name, m.built_for, m.node] for m in found]
        table = "\n".join(format_table(rows, indent="  "))
        # Only where following it can succeed: a missing distribution is installed, not allowed.
        allowable = dict.fromkeys(m.name for m in refusing if m.name not in absent)
        names = " ".join(f"--allow-mismatch {n}" for n in allowable)
        hint = f"; if you know the artifacts still run here, pass {names}" if names else ""
        system = [m.name for m in refusing if m.name in engine.system_components]
        upgrade = (
            f"; for {', '.join(system)}: upgrade the system package (apt-get or yum)"
            if system
            else ""
        )
        raise NodeMismatch(
            f"this node differs from the build of {recipe.name}:\n{table}\n"
            "serve on a node that matches, or compile for this one (for a distribution: "
            f"{engine.toolchain_fix(recipe.toolchain)}){upgrade}{hint}"
        )
    return found
