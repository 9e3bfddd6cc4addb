"""Neuron SDK release sets as data: which distribution versions each SDK release runs vLLM-Neuron
with, read from ``neuronbuild/data/neuron_releases.txt`` (one row per release, sources in its
header), and the recipe rule that checks a ``toolchain`` against them.

A release the table does not know (2.33 and 2.34 ship vllm-neuron 0.29 on torch-neuronx) is not
refused: the pins are used as written, with a warning naming what is left unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib import resources

from neuronbuild.engines.versions import pin_matches
from neuronbuild.errors import MISSING, RecipeError

TABLE = "neuron_releases.txt"
"""The release table's file name in ``neuronbuild.data``."""

NOT_SHIPPED = "-"
"""A cell for a distribution the release does not ship."""


@cache
def sdk_releases() -> dict[str, dict[str, frozenset[str]]]:
    """Release (``2.32.0``) -> distribution -> the public versions it ships (several where a
    release ships builds for several torch versions); a distribution the release does not ship is
    absent. Rows in the table's order, newest first.

    Raises:
        ValueError: a malformed table (a row whose cells do not match the header).
    """
    text = resources.files("neuronbuild.data").joinpath(TABLE).read_text()
    rows = [line.split("\t") for line in text.splitlines() if line and not line.startswith("#")]
    header, body = rows[0], rows[1:]
    out: dict[str, dict[str, frozenset[str]]] = {}
    for row in body:
        if len(row) != len(header):
            raise ValueError(f"{TABLE}: row {row[0]!r} has {len(row)} cells, not {len(header)}")
        out[row[0]] = {
            dist: frozenset(cell.split("|"))
            for dist, cell in zip(header[1:], row[1:], strict=True)
            if cell != NOT_SHIPPED
        }
    return out


def release_of(vllm_neuron: str) -> str | None:
    """The SDK release whose vllm-neuron is ``vllm_neuron`` (a pin, labelled or not), or None."""
    return next(
        (r for r, d in sdk_releases().items() if pin_matches(min(d["vllm-neuron"]), vllm_neuron)),
        None,
    )


def toolchain_rules(
    toolchain: Mapping[str, str], required: tuple[str, ...]
) -> tuple[list[RecipeError], list[str]]:
    """Check the recipe's ``toolchain`` pins against the release its vllm-neuron pin names.

    A known release: every distribution it ships must be pinned at its version (on the public
    version: a pin with the SDK's local label, ``2.27.5334.0+f702b353``, is the same version), and
    torch-neuronx only where the release ships it. An unknown release: only a missing ``vllm`` pin
    is an error; one warning names the release and the other ``required`` distributions that are
    not pinned (neither checked at compile and serve nor keyed). No vllm-neuron pin: nothing
    here (the generic "must pin" check reports it).
    """
    pinned = toolchain.get("vllm-neuron")
    if pinned is None:
        return [], []
    release = release_of(pinned)
    if release is None:
        known = ", ".join(
            f"{min(d['vllm-neuron'])} (Neuron {r})" for r, d in sdk_releases().items()
        )
        unpinned = [d for d in required if d not in toolchain and d != "vllm"]
        errors = [
            RecipeError(
                "toolchain.vllm",
                MISSING,
                f"vllm-neuron {pinned} is a vLLM plugin: pin the vLLM it runs on (its version is "
                "the first three fields of vllm-neuron's)",
            )
        ]
        unchecked = (
            f"; {', '.join(unpinned)} not pinned: not checked at compile or serve, not keyed"
            if unpinned
            else ""
        )
        return errors if "vllm" not in toolchain else [], [
            f"toolchain.vllm-neuron: {pinned} is not a Neuron SDK release neuronbuild knows "
            f"({known}); the pins are used as written, not checked against a release set"
            f"{unchecked}"
        ]
    dists = sdk_releases()[release]
    errors = []
    for dist, versions in dists.items():
        have = toolchain.get(dist)
        if have is None or not any(pin_matches(v, have) for v in versions):
            errors.append(
                RecipeError(
                    f"toolchain.{dist}",
                    have if have is not None else MISSING,
                    f"Neuron {release} (vllm-neuron {pinned}) runs with {dist} "
                    f"{' or '.join(sorted(versions))}; pin that",
                )
            )
    if "torch-neuronx" in toolchain and "torch-neuronx" not in dists:
        errors.append(
            RecipeError(
                "toolchain.torch-neuronx",
                toolchain["torch-neuronx"],
                f"Neuron {release} ships no torch-neuronx (vllm-neuron {pinned} runs on "
                "libtorch-neuronx-lite); remove the pin",
            )
        )
    return errors, []


def install_fix(toolchain: Mapping[str, str]) -> str:
    """The real fix for a Neuron host whose installed versions differ from ``toolchain``: the
    wheels come from the Neuron pip repository (aws-neuron-sdk @81ce03ae
    ``vllm-neuron/docs/getting-started/setup-guide.md``, Option A: ``pip install
    --extra-index-url=https://pip.repos.neuron.amazonaws.com``) or that release's DLAMI (Option B),
    never neuronbuild's ``make install`` (vLLM's CPU build)."""
    release = release_of(toolchain.get("vllm-neuron", "")) if "vllm-neuron" in toolchain else None
    pins = " ".join(f"{d}=={v}" for d, v in sorted(toolchain.items()))
    where = f"Neuron {release}" if release else "the Neuron SDK release of these pins"
    return (
        f"install {where} on this host: `pip install "
        f"--extra-index-url=https://pip.repos.neuron.amazonaws.com {pins}` (or use that "
        "release's Neuron DLAMI)"
    )
