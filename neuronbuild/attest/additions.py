"""Signing an addition (:mod:`neuronbuild.store.additions`) and checking its signatures: the
node's key over its Statement, in the DSSE envelope the addition's object is. securesystemslib
computes and checks the signatures, as for attestations (:mod:`.envelope`)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import FormatError, VerificationError
from securesystemslib.signer import Key, Signer

from neuronbuild.attest.envelope import PAYLOAD_TYPE
from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.store.additions import Addition


def seal_addition(statement: dict[str, Any], signer: Signer | None) -> tuple[str, bytes]:
    """``(name, bytes)`` of the addition object of ``statement``
    (:func:`~neuronbuild.store.additions.addition_statement`): its DSSE envelope in canonical
    JSON, signed by ``signer`` or by nobody, named by the ``sha256:`` of its payload."""
    payload = canonical_json(statement)
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    if signer is not None:
        envelope.sign(signer)
    return sha256_digest(payload), canonical_json(envelope.to_dict())


def verified_by(addition: Addition, keys: list[Key]) -> str | None:
    """The keyid of the first of ``keys`` whose signature over ``addition``'s Statement
    verifies (securesystemslib's :meth:`Envelope.verify`), else None (always for an unsigned
    addition)."""
    stored = {
        "payload": base64.b64encode(addition.payload).decode(),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"keyid": k, "sig": sig} for k, sig in addition.signatures],
    }
    try:
        envelope = Envelope.from_dict(stored)
    except (ValueError, FormatError, binascii.Error):  # a sig that is not base64, a keyid twice
        return None
    for key in keys:
        try:
            envelope.verify([key], 1)
        except (VerificationError, FormatError, ValueError):
            continue
        return str(key.keyid)
    return None
