"""A node's receipt: what it served and proved (issue 45 item 4).

Written by ``neuronbuild probe`` once the node's server answered as CI's did and compiled nothing,
beside the build in the store (``receipts/<manifest>/<sha256 of the object>.json``). It is an
in-toto Statement v1 whose subject is the manifest, in a DSSE envelope as an addition's object is
(:func:`~neuronbuild.attest.additions.seal_addition`), signed by the node's key where ``probe
--key`` names one, else by nobody. Its predicate (:data:`RECEIPT_TYPE`): the ref and manifest
served, the digest of the weights the build records (which ``serve`` checked), the release
installed (the recipe's pinned distributions, as this node's wheels report them), the node (host
name, machine), the probe's result and the time. CI counts them (``ls``) before it promotes a
build further. An unsigned receipt is evidence for operators, not a trust root: a store writer
can forge one.
"""

from __future__ import annotations

import platform
import socket
import time
from typing import TYPE_CHECKING, Any

from neuronbuild.attest.additions import seal_addition
from neuronbuild.attest.statement import STATEMENT_TYPE
from neuronbuild.digest import canonical_json, hex_of, sha256_digest
from neuronbuild.engines.versions import installed_version
from neuronbuild.recipe import Recipe
from neuronbuild.store.records import Manifest

if TYPE_CHECKING:
    from securesystemslib.signer import Signer

RECEIPT_TYPE = "https://neuronbuild.dev/receipt/v1"
"""The receipt's in-toto predicate type."""


def weights_digest(manifest: Manifest) -> str | None:
    """One digest of the weights ``manifest`` records (the sha256 of their canonical JSON list),
    or None when it records none."""
    if manifest.weights is None:
        return None
    return sha256_digest(canonical_json([w.to_json() for w in manifest.weights]))


def receipt_statement(
    recipe: Recipe,
    manifest: Manifest,
    digest: str,
    *,
    ref: str | None,
    answers: int,
    weights_checked: bool | None = None,
    now: float | None = None,
) -> dict[str, Any]:
    """The in-toto Statement of a receipt for ``manifest`` (``digest``), served under ``ref``
    (None: by digest), whose probe matched ``answers`` answers; ``weights_checked``: whether the
    node's weight files are the ones the build records (None: it records none, or the model is
    not on this node); ``now``: seconds since the epoch (default: this host's clock)."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": manifest.name, "digest": {"sha256": hex_of(digest)}}],
        "predicateType": RECEIPT_TYPE,
        "predicate": {
            "ref": ref,
            "weights": {"digest": weights_digest(manifest), "as_built": weights_checked},
            "release": {d: installed_version(d) for d in sorted(recipe.toolchain)},
            "node": {"host": socket.gethostname(), "machine": platform.machine()},
            "probe": {"answers": answers, "compiled": 0},
            "time": float(time.time() if now is None else now),
        },
    }


def receipt_bytes(statement: dict[str, Any], signer: Signer | None) -> bytes:
    """The object a receipt is stored as: ``statement``'s DSSE envelope in canonical JSON,
    signed by ``signer`` (the node's key) or by nobody."""
    return seal_addition(statement, signer)[1]
