"""The DSSE envelope an attestation travels in: signing a Statement, and reading an envelope
from untrusted bytes.

DSSE (github.com/secure-systems-lab/dsse, ``envelope.md``): ``{"payload": base64,
"payloadType": ..., "signatures": [{"keyid", "sig": base64}]}``, each signature over the
pre-authentication encoding of type and payload. The envelope, its PAE and the signature checks
are securesystemslib's (:class:`securesystemslib.dsse.Envelope`); this module only bounds what it
is handed, so hostile bytes are one line, exit 2 (:class:`~neuronbuild.errors.StoreDataInvalid`).
"""

from __future__ import annotations

import binascii
import re
from dataclasses import dataclass
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import FormatError, VerificationError
from securesystemslib.signer import Key, Signer

from neuronbuild.attest.keyless import is_bundle, read_bundle
from neuronbuild.attest.statement import PREDICATE_TYPE, statement_subject
from neuronbuild.digest import canonical_json, parse_strict
from neuronbuild.errors import StoreDataInvalid

PAYLOAD_TYPE = "application/vnd.in-toto+json"
"""The DSSE payload type of an in-toto Statement (in-toto attestation spec, envelope.md)."""

MAX_DEPTH = 32
"""Deepest nesting of arrays and objects accepted in an envelope or its Statement; ours nest 8."""

MAX_SIGNATURES = 16
"""Most signatures one envelope may carry."""


def sign_statement(statement: dict[str, Any], signer: Signer) -> bytes:
    """The DSSE envelope of ``statement`` (its canonical JSON as payload) signed by ``signer``,
    as canonical JSON bytes."""
    envelope = Envelope(canonical_json(statement), PAYLOAD_TYPE, {})
    envelope.sign(signer)
    return canonical_json(envelope.to_dict())


def _depth(value: Any) -> int:
    """How deeply ``value`` nests (a scalar: 0), without recursing."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        children = (
            item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        )
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        todo.extend((child, level + 1) for child in children)
    return deepest


def parse_json(data: bytes, what: str) -> Any:
    """Strict JSON of untrusted bytes: UTF-8, no duplicate keys, no NaN, at most
    :data:`MAX_DEPTH` deep (any spelling: standard tools write their own).

    Raises:
        StoreDataInvalid: anything else, naming ``what``.
    """
    value = parse_strict(data, what)
    if _depth(value) > MAX_DEPTH:
        raise StoreDataInvalid(f"{what}: nested deeper than {MAX_DEPTH} levels")
    return value


@dataclass(frozen=True)
class Attestation:
    """One stored attestation, read but not yet trusted: its ``envelope``, the keyids its
    signatures claim (``keyids``), the manifest its Statement names (``subject``) and the
    ``predicate``. Only :meth:`verified_by` says whether a key really signed it."""

    envelope: Envelope | None
    keyids: tuple[str, ...]
    subject: str
    predicate: dict[str, Any]
    subject_name: str = ""
    """The Statement's subject ``name``: the recipe name the signer bound the manifest to."""
    predicate_type: str = PREDICATE_TYPE
    bundle: Any = None
    """A keyless attestation's Sigstore bundle (:mod:`neuronbuild.attest.keyless`; its
    ``envelope`` is None): only a :class:`~neuronbuild.attest.keyless.KeylessIdentity`
    verifies it."""

    def verified_by(self, keys: list[Key]) -> str | None:
        """The keyid of the first of ``keys`` whose signature over this envelope verifies
        (securesystemslib's :meth:`Envelope.verify`), else None (always for a bundle)."""
        if self.envelope is None:
            return None
        for key in keys:
            try:
                self.envelope.verify([key], 1)
            except VerificationError:
                continue
            return str(key.keyid)
        return None


KEYID = re.compile(r"[0-9A-Za-z._:+/=-]{0,128}")
"""A signature's keyid as read: securesystemslib's are 64 hex digits, other tools' may be other
printable names or empty; anything else (control bytes, escapes) is refused, since refusals
print it."""


def read_attestation(data: bytes, what: str) -> Attestation:
    """Parse a stored DSSE envelope of an in-toto Statement, or a Sigstore bundle of one
    (keyless, told apart by its ``mediaType``), unverified.

    Raises:
        StoreDataInvalid: malformed, huge-nested or duplicate-keyed JSON, other fields than
            DSSE's, a payload type other than :data:`PAYLOAD_TYPE`, bad base64, no signature or
            over :data:`MAX_SIGNATURES`, or a payload that is no Statement v1 of one manifest.
    """
    raw = parse_json(data, what)
    if is_bundle(raw):
        return _read_bundle(data, what)
    if not isinstance(raw, dict) or set(raw) != {"payload", "payloadType", "signatures"}:
        raise StoreDataInvalid(f"{what}: not a DSSE envelope (payload, payloadType, signatures)")
    if raw["payloadType"] != PAYLOAD_TYPE:
        found = ascii(raw["payloadType"])[:80]
        raise StoreDataInvalid(f"{what}: payload type {found}, expected {PAYLOAD_TYPE}")
    signatures = raw["signatures"]
    if not isinstance(raw["payload"], str) or not isinstance(signatures, list):
        raise StoreDataInvalid(f"{what}: payload must be a string and signatures a list")
    if not 1 <= len(signatures) <= MAX_SIGNATURES or not all(
        isinstance(s, dict)
        and set(s) == {"keyid", "sig"}
        and all(isinstance(v, str) for v in s.values())
        for s in signatures
    ):
        raise StoreDataInvalid(
            f"{what}: expected 1 to {MAX_SIGNATURES} signatures, each {{keyid, sig}} strings"
        )
    keyids = tuple(str(s["keyid"]) for s in signatures)
    if not all(KEYID.fullmatch(k) for k in keyids):  # printed in refusals: no control bytes
        raise StoreDataInvalid(f"{what}: a keyid that is not {KEYID.pattern}")
    try:  # from_dict consumes the signature objects it is given: give it copies
        envelope = Envelope.from_dict({**raw, "signatures": [dict(s) for s in signatures]})
    except (KeyError, ValueError, TypeError, FormatError, binascii.Error) as exc:
        raise StoreDataInvalid(f"{what}: not a DSSE envelope ({ascii(str(exc))[:80]})") from None
    subject, name, predicate = statement_subject(
        parse_json(envelope.payload, f"{what}: payload"), what
    )
    return Attestation(envelope, keyids, subject, predicate, name)


def _read_bundle(data: bytes, what: str) -> Attestation:
    """A keyless attestation: the Sigstore bundle ``data`` and the Statement of its DSSE envelope
    (unverified), both as sigstore-python parsed them: the payload read here is the payload its
    verifier checks.

    Raises:
        StoreDataInvalid: see :func:`~neuronbuild.attest.keyless.read_bundle`; a payload type
            other than :data:`PAYLOAD_TYPE`, or a payload that is no Statement of one manifest.
    """
    bundle = read_bundle(data, what)
    dsse = bundle._inner.dsse_envelope
    assert dsse is not None  # read_bundle refused a bundle without one
    if dsse.payload_type != PAYLOAD_TYPE:
        found = ascii(dsse.payload_type)[:80]
        raise StoreDataInvalid(f"{what}: payload type {found}, expected {PAYLOAD_TYPE}")
    payload = bytes(dsse.payload)
    subject, name, predicate = statement_subject(parse_json(payload, f"{what}: payload"), what)
    return Attestation(None, (), subject, predicate, name, bundle=bundle)
