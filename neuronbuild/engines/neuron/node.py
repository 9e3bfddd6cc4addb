"""The Neuron device family of the node ``serve`` runs on, read the way the Neuron tools read it.

The Neuron SDK's ``get_platform_target`` reads the EC2 instance type from
``/sys/devices/virtual/dmi/id/product_name`` (e.g. ``trn2.48xlarge``) and takes its family
(``trn1`` for ``trn1n`` too). ``NEURON_PLATFORM_TARGET_OVERRIDE`` is that tool's override, but on a
serving node it would also re-target what vLLM-Neuron builds, so it is refused there; a container
that hides the instance type names its family with :data:`NODE_TARGET_OVERRIDE` instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from neuronbuild import envs

PRODUCT_NAME = Path("sys/devices/virtual/dmi/id/product_name")
"""Where the instance type is, relative to the file system root."""

NODE_TARGET_OVERRIDE = envs.NEURONBUILD_NODE_TARGET
"""The node's target family (``trn1|trn2|trn3|inf2``) when the instance type cannot be read."""

FAMILY = re.compile(r"^(trn\d|inf\d)")


def node_target(root: Path = Path("/"), environ: Mapping[str, str] | None = None) -> str | None:
    """This node's Neuron target family, or None when it is not a Neuron instance (or the
    instance type cannot be read). ``root`` is the file system root (a test's fake tree);
    ``environ`` where :data:`NODE_TARGET_OVERRIDE` is read (default: this process's).

    Raises:
        EnvInvalid: :data:`NODE_TARGET_OVERRIDE` names no Neuron family (exit 2)."""
    if value := envs.NODE_TARGET.get(environ):
        return value
    try:
        product = (root / PRODUCT_NAME).read_text().strip()
    except OSError:
        return None
    match = FAMILY.match(product)
    return match.group(1) if match else None


def target_differences(
    built_for: str, root: Path = Path("/"), environ: Mapping[str, str] | None = None
) -> list[tuple[str, str, str]]:
    """``[("target", built_for, this node's family)]`` when they differ, else empty."""
    here = node_target(root, environ)
    if here == built_for:
        return []
    shown = here or f"unknown (set {NODE_TARGET_OVERRIDE} in a container)"
    return [("target", built_for, shown)]
