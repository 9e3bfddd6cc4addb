"""A node's receipt: what it served and proved (issue 45 item 4).

Written by ``neuronbuild probe`` once the node's server answered as CI's did and compiled nothing,
beside the build in the store (``receipts/<manifest>/<sha256 of the receipt>.json``): the ref and
manifest served, the digest of the weights the build records (which ``serve`` checked), the
release installed (the recipe's pinned distributions, as this node's wheels report them), the
node (host name, machine), the probe's result and the time. CI can count them (``ls``) before it
promotes a build further. Not signed yet: a store writer can forge one, so a receipt is evidence
for operators, not a trust root.
"""

from __future__ import annotations

import platform
import socket
import time

from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.engines.versions import installed_version
from neuronbuild.recipe import Recipe
from neuronbuild.store.records import Manifest

RECEIPT_SCHEMA = "neuronbuild.receipt/1"


def weights_digest(manifest: Manifest) -> str | None:
    """One digest of the weights ``manifest`` records (the sha256 of their canonical JSON list),
    or None when it records none."""
    if manifest.weights is None:
        return None
    return sha256_digest(canonical_json([w.to_json() for w in manifest.weights]))


def receipt_bytes(
    recipe: Recipe,
    manifest: Manifest,
    digest: str,
    *,
    ref: str | None,
    answers: int,
    now: float | None = None,
) -> bytes:
    """The canonical bytes of a receipt for ``manifest`` (``digest``), served under ``ref``
    (None: by digest), whose probe matched ``answers`` answers; ``now``: seconds since the epoch
    (default: this host's clock)."""
    return canonical_json(
        {
            "schema": RECEIPT_SCHEMA,
            "ref": ref,
            "manifest": digest,
            "weights": weights_digest(manifest),
            "release": {d: installed_version(d) for d in sorted(recipe.toolchain)},
            "node": {"host": socket.gethostname(), "machine": platform.machine()},
            "probe": {"answers": answers, "compiled": 0},
            "time": float(time.time() if now is None else now),
        }
    )
