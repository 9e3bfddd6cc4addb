"""Neuron SDK releases as data: which distributions each release runs vLLM Neuron with, which one
compiles, and which rule set it follows, read from ``neuronbuild/data/neuron_releases.yaml`` (one
row per release, sources in each row); and the recipe rule that checks a ``toolchain`` against
them.

Every rule that differs between releases (the encoder namespace, LoRA, the compile routes of
``VLLM_NEURON_BACKEND``, the Precompile Cache) is a field of the release's :class:`Rules`, chosen
here once per recipe (:func:`resolve`); no other module compares versions. A recipe whose pins
name no release of the table is planned by the nearest release's rules, with one warning naming
what is left unchecked.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources

from packaging.version import InvalidVersion, Version

from neuronbuild.engines.versions import pin_matches, public_version
from neuronbuild.errors import MISSING, RecipeError

TABLE = "neuron_releases.yaml"
"""The release table's file name in ``neuronbuild.data``."""

UNPUBLISHED = "*"
"""A version cell for a distribution the release ships at a version no source we read gives."""

RUNTIMES = ("libtorch-neuronx-lite", "torch-neuronx")
"""The distributions vLLM Neuron has compiled through (the libtorch-neuronx-lite end-of-support
announcement: "The vLLM Neuron plugin is moving to torch-neuronx")."""


@dataclass(frozen=True)
class Rules:
    """The behaviour a vLLM Neuron release follows where releases differ.

    ``encoder_namespace``: the ``additional_config`` key of the multimodal encoder settings
    (``vision_neuron_config`` up to 0.24, ``encoder_neuron_config`` from 0.29); ``lora``: whether
    ``--enable-lora`` is served; ``routes``: ``VLLM_NEURON_BACKEND`` value -> compile route (empty
    where the plugin does not read it); ``default_route``: the route when it is unset;
    ``precompile_cache``: whether a device start with an explicit route value saves its trace
    (never in CPU mode). ``sources``: the pages or code each field comes from.
    """

    name: str
    summary: str
    encoder_namespace: str
    lora: bool
    routes: Mapping[str, str]
    default_route: str
    precompile_cache: bool
    sources: str

    def route(self, value: str | None) -> str | None:
        """The compile route ``VLLM_NEURON_BACKEND=value`` selects (``value`` None: unset), or
        None for a value these rules do not name (with no published values, every set one)."""
        if value is None or not value.strip():
            return self.default_route
        return self.routes.get(value.strip())

    def explicit_default(self) -> str:
        """The first ``VLLM_NEURON_BACKEND`` value that names the default route (``neuron_native``):
        what a node sets so that the Precompile Cache is on (:func:`parse_table` refuses rules
        with a Precompile Cache and no such value)."""
        return next(v for v, route in self.routes.items() if route == self.default_route)


@dataclass(frozen=True)
class Release:
    """One Neuron SDK release: ``packages`` distribution -> the public versions it ships (None:
    shipped, version unpublished in our sources), each to be pinned; ``optional`` ones a recipe
    may pin; ``runtime`` the distribution that compiles; ``rules`` the set it follows;
    ``system`` the system packages it ships."""

    name: str
    date: str
    rules: Rules
    runtime: str
    packages: Mapping[str, frozenset[str] | None]
    optional: Mapping[str, frozenset[str] | None]
    sources: str
    system: Mapping[str, str] = dataclasses.field(default_factory=dict)
    """System package -> the version the release ships (the runtime library, the driver), the
    oldest a node serving its NEFFs may run (:mod:`.system`); empty where no page gives them."""

    def shipped(self, dist: str) -> frozenset[str] | None:
        """The versions of ``dist`` this release ships (None: unpublished); KeyError if none."""
        return {**self.optional, **self.packages}[dist]

    def matches(self, dist: str, pin: str) -> bool:
        """Whether ``pin`` is a version of ``dist`` this release ships (any, where unpublished)."""
        versions = self.shipped(dist)
        return versions is None or any(pin_matches(v, pin) for v in versions)

    def known(self, dist: str, pin: str) -> bool:
        """Whether ``pin`` is one of the published versions of ``dist`` in this release."""
        versions = {**self.optional, **self.packages}.get(dist)
        return versions is not None and any(pin_matches(v, pin) for v in versions)

    def problems(self, toolchain: Mapping[str, str]) -> list[str]:
        """Distributions of this release that ``toolchain`` leaves unpinned or pins otherwise."""
        out = [d for d in self.packages if d not in toolchain or not self.matches(d, toolchain[d])]
        out += [d for d in self.optional if d in toolchain and not self.matches(d, toolchain[d])]
        return out + [d for d in RUNTIMES if d in toolchain and d not in self.all_dists()]

    def all_dists(self) -> set[str]:
        return {*self.packages, *self.optional}


@dataclass(frozen=True)
class Resolution:
    """What a recipe's pins resolve to: the ``release`` they name (None: none of the table) and
    the ``rules`` to plan by (the release's, else the nearest release's, ``nearest``)."""

    release: Release | None
    nearest: Release

    @property
    def rules(self) -> Rules:
        return (self.release or self.nearest).rules


def _versions(cell: object, where: str) -> frozenset[str] | None:
    if not isinstance(cell, str) or not cell:
        raise ValueError(f"{TABLE}: {where} must be a version string")
    return None if cell == UNPUBLISHED else frozenset(cell.split("|"))


def parse_table(text: str) -> tuple[Release, ...]:
    """The releases of a table in :data:`TABLE`'s format, in its order (newest first).

    Raises:
        ValueError: a malformed table (a missing field, a rule set no release table defines, a
            runtime that is not one of the release's packages).
    """
    import yaml  # only when a Neuron recipe is checked: not for --help

    data = yaml.safe_load(text)
    try:
        rules = {name: Rules(name=name, **fields) for name, fields in data["rules"].items()}
        for name, rule in rules.items():
            if rule.precompile_cache and rule.default_route not in rule.routes.values():
                raise ValueError(
                    f"{TABLE}: rules {name!r} have a Precompile Cache but no VLLM_NEURON_BACKEND "
                    "value naming their default route"
                )
        out = []
        for row in data["release"]:
            where = f"release {row.get('name')!r}"
            if row["rules"] not in rules:
                raise ValueError(f"{TABLE}: {where} names rules {row['rules']!r}, not defined")
            if not {"vllm", "vllm-neuron"} <= set(row["packages"]):
                raise ValueError(f"{TABLE}: {where} must list vllm and vllm-neuron in packages")
            if row["runtime"] not in row["packages"]:
                raise ValueError(f"{TABLE}: {where}: runtime {row['runtime']!r} is not a package")
            out.append(
                Release(
                    name=row["name"],
                    date=row["date"],
                    rules=rules[row["rules"]],
                    runtime=row["runtime"],
                    packages={d: _versions(v, f"{where} {d}") for d, v in row["packages"].items()},
                    optional={d: _versions(v, f"{where} {d}") for d, v in row["optional"].items()},
                    sources=row["sources"],
                    system={str(k): str(v) for k, v in (row.get("system") or {}).items()},
                )
            )
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{TABLE}: missing or malformed field {exc}") from exc
    return tuple(out)


@cache
def sdk_releases() -> tuple[Release, ...]:
    """The shipped table's releases, newest first (:func:`parse_table`)."""
    return parse_table(resources.files("neuronbuild.data").joinpath(TABLE).read_text())


def release_named(name: str) -> Release:
    """The release called ``name`` (``2.33.1``); KeyError if the table lacks it."""
    return next(r for r in sdk_releases() if r.name == name)


def _version(text: str) -> Version | None:
    try:
        return Version(public_version(text))
    except InvalidVersion:
        return None


def _plugins(releases: Iterable[Release]) -> list[Version]:
    """Every published vllm-neuron version of ``releases``."""
    cells = (r.packages.get("vllm-neuron") or frozenset() for r in releases)
    return [v for cell in cells for v in map(_version, cell) if v is not None]


def identify(toolchain: Mapping[str, str]) -> Release | None:
    """The release ``toolchain`` names, or None (no vllm-neuron pin, or no release fits).

    The candidates are the releases whose published vllm-neuron version is the pin; failing
    those, a release whose vllm-neuron is unpublished (2.34.0) when the pin is a version newer
    than every published one of the older releases (those after it in the table) and another of
    its published versions is pinned (``nki: 0.8.0``). Where several share a vllm-neuron (2.33.0
    and 2.33.1) the pins fit best: fewest :meth:`Release.problems`, then the newest (a later
    rebuild publishes more).
    """
    pin = toolchain.get("vllm-neuron")
    if pin is None:
        return None
    releases = sdk_releases()
    named = [r for r in releases if r.known("vllm-neuron", pin)]
    wanted = _version(pin)
    if not named and wanted is not None:
        named = [
            r
            for i, r in enumerate(releases)
            if r.packages["vllm-neuron"] is None
            and all(wanted > v for v in _plugins(releases[i + 1 :]))
            and any(r.known(d, v) for d, v in toolchain.items() if d not in ("vllm", "vllm-neuron"))
        ]
    if not named:
        return None
    return min(named, key=lambda r: len(r.problems(toolchain)))  # the first (newest) of a tie


def vllm_of(plugin: str) -> str:
    """The vLLM version a vllm-neuron version runs on: its first three fields ("0.21.0.1.0.0
    (supports vLLM version 0.21.0; vllm-neuron version is 1.0.0)", component release notes,
    v2.31.0)."""
    return ".".join(public_version(plugin).split(".")[:3])


def nearest(pin: str | None) -> Release:
    """The release whose rules plan a vllm-neuron ``pin`` the table does not know, by the vLLM
    it runs on (:func:`vllm_of`): the newest release for a vLLM newer than every published one,
    or for a pin that is no version; else the newest release whose published vLLM is not newer
    than the pin's (``0.29.0.1.0.0`` gets 2.33's rules); else the oldest."""
    releases = sdk_releases()
    wanted = _version(vllm_of(pin)) if pin else None
    published = [
        (release, max(v for v in map(_version, map(vllm_of, cell)) if v is not None))
        for release in releases
        if (cell := release.packages.get("vllm-neuron")) is not None
    ]
    if wanted is None or (published and wanted > max(v for _, v in published)):
        return releases[0]
    return next((release for release, v in published if wanted >= v), releases[-1])


def resolve(toolchain: Mapping[str, str]) -> Resolution:
    """The release ``toolchain`` names and the rules a recipe pinning it is planned by (worked
    out once per set of pins: planning asks for every environment variable)."""
    return _resolve(tuple(sorted(toolchain.items())), id(sdk_releases()))


@functools.lru_cache(maxsize=64)
def _resolve(pins: tuple[tuple[str, str], ...], table: int) -> Resolution:
    """:func:`resolve` of ``pins`` against the table whose ``id`` is ``table`` (a test may plan
    against another table)."""
    toolchain = dict(pins)
    release = identify(toolchain)
    return Resolution(release, release or nearest(toolchain.get("vllm-neuron")))


def rules_for(toolchain: Mapping[str, str]) -> Rules:
    """The rule set a recipe with ``toolchain`` is planned by (:func:`resolve`)."""
    return resolve(toolchain).rules


def toolchain_rules(toolchain: Mapping[str, str]) -> tuple[list[RecipeError], list[str]]:
    """Check the recipe's ``toolchain`` pins against the release they name.

    A known release: every distribution of its ``packages`` must be pinned, at a version it
    ships where the version is published (on the public version: a pin with the SDK's local
    label, ``2.27.5334.0+f702b353``, is the same version), its ``optional`` ones at a shipped
    version when pinned, and no runtime distribution it does not ship. An unknown release: a
    missing ``vllm`` pin and a missing runtime pin (libtorch-neuronx-lite or torch-neuronx, the
    distribution whose version the plugin's key reads) are errors; one warning names the
    release whose rules plan it and the other distributions left unpinned. No vllm-neuron pin:
    nothing here (the generic "must pin" check reports it).
    """
    pinned = toolchain.get("vllm-neuron")
    if pinned is None:
        return [], []
    found = resolve(toolchain)
    if found.release is None:
        return _unknown(toolchain, pinned, found.nearest)
    release = found.release
    errors = _vllm_mismatch(toolchain, pinned)
    for dist in release.problems(toolchain):
        have = toolchain.get(dist)
        if dist not in release.all_dists():
            fix = f"ships no {dist} (vllm-neuron {pinned} compiles through {release.runtime})"
            errors.append(
                RecipeError(
                    f"toolchain.{dist}", have, f"Neuron {release.name} {fix}; remove the pin"
                )
            )
        elif have is None:
            errors.append(
                RecipeError(f"toolchain.{dist}", MISSING, _pin_what(dist, pinned, release))
            )
        elif (versions := release.shipped(dist)) is not None and dist != "vllm":
            errors.append(
                RecipeError(
                    f"toolchain.{dist}",
                    have,
                    f"Neuron {release.name} (vllm-neuron {pinned}) runs with {dist} "
                    f"{' or '.join(sorted(versions))}; pin that",
                )
            )
    return errors, []


def _pin_what(dist: str, pinned: str, release: Release) -> str:
    """How to pin ``dist`` beside vllm-neuron ``pinned`` of ``release``: its versions in every
    release that ships that plugin (2.33.0 and 2.33.1 share one), an unpublished one said so."""
    shipping = [r for r in sdk_releases() if r.known("vllm-neuron", pinned) and dist in r.packages]
    shipping = shipping or [release]
    shipped = "; ".join(
        f"Neuron {r.name}: "
        + (" or ".join(sorted(v)) if (v := r.shipped(dist)) is not None else "unpublished")
        for r in shipping
    )
    return f"vllm-neuron {pinned} runs with {dist} ({shipped}); pin the one installed"


def _vllm_mismatch(toolchain: Mapping[str, str], pinned: str) -> list[RecipeError]:
    """A ``vllm`` pin that is not the vLLM vllm-neuron ``pinned`` runs on (:func:`vllm_of`)."""
    have = toolchain.get("vllm")
    if have is None or pin_matches(vllm_of(pinned), have):
        return []
    return [
        RecipeError(
            "toolchain.vllm",
            have,
            f"vllm-neuron {pinned} runs on vLLM {vllm_of(pinned)} (the first three fields of its "
            "version); pin that",
        )
    ]


def _unknown(
    toolchain: Mapping[str, str], pinned: str, near: Release
) -> tuple[list[RecipeError], list[str]]:
    errors = _vllm_mismatch(toolchain, pinned)
    if "vllm" not in toolchain:
        errors.append(
            RecipeError(
                "toolchain.vllm",
                MISSING,
                f"vllm-neuron {pinned} is a vLLM plugin: pin the vLLM it runs on (its version is "
                "the first three fields of vllm-neuron's)",
            )
        )
    if not any(d in toolchain for d in RUNTIMES):
        errors.append(
            RecipeError(
                "toolchain.libtorch-neuronx-lite",
                MISSING,
                "pin the distribution vLLM Neuron compiles through (its version is in every graph "
                "key): libtorch-neuronx-lite up to Neuron 2.34, torch-neuronx after",
            )
        )
    unpinned = [d for d in near.packages if d not in toolchain and d not in ("vllm", *RUNTIMES)]
    unchecked = (
        f"; {', '.join(unpinned)} not pinned: not checked at compile or serve, not keyed"
        if unpinned
        else ""
    )
    known = ", ".join(r.name for r in sdk_releases())
    return errors, [
        f"toolchain.vllm-neuron: {pinned} is not a Neuron SDK release neuronbuild knows "
        f"({known}); planned by the rules of the nearest, Neuron {near.name} ({near.rules.summary})"
        f"; the pins are used as written and keyed, not checked against a release set{unchecked}"
    ]


def install_fix(toolchain: Mapping[str, str]) -> str:
    """The real fix for a Neuron host whose installed versions differ from ``toolchain``: the
    wheels come from the Neuron pip repository (aws-neuron-sdk @81ce03ae
    ``vllm-neuron/docs/getting-started/setup-guide.md``, Option A: ``pip install
    --extra-index-url=https://pip.repos.neuron.amazonaws.com``) or that release's DLAMI (Option B),
    never neuronbuild's ``make install`` (vLLM's CPU build)."""
    release = identify(toolchain)
    pins = " ".join(f"{d}=={v}" for d, v in sorted(toolchain.items()))
    where = f"Neuron {release.name}" if release else "the Neuron SDK release of these pins"
    return (
        f"install {where} on this host: `pip install "
        f"--extra-index-url=https://pip.repos.neuron.amazonaws.com {pins}` (or use that "
        "release's Neuron DLAMI)"
    )
