"""A Sigstore instance made inside a test: a Fulcio-like certificate authority, a CT log key and a
Rekor log key, their ``trusted_root.json``, and Sigstore bundles signed the way those services
sign, so that sigstore-python's real ``Verifier`` checks them offline, as a node does.

Nothing here reaches Sigstore, and nothing is taken from sigstore-python: each piece is written
from its specification, so a bundle it makes holds only if the verifier and the specs agree.
- The certificate: Fulcio's profile (code-signing EKU, the identity as an email or URI SAN, the
  OIDC issuer in extensions 1.3.6.1.4.1.57264.1.1 (raw) and .1.8 (a DER UTF8String), an
  embedded SCT).
- The SCT: RFC 6962 section 3.2, over the precertificate's TBS (the certificate less its SCT
  list) and the issuer's key hash, signed by the CT log key, listed as in section 3.3.
- The log entry: Rekor's ``dsse`` v0.0.1 body, a one-leaf RFC 6962 Merkle tree (the root is
  the leaf hash), a checkpoint in the C2SP signed-note format, and the inclusion promise (SET):
  Rekor's signature over the RFC 8785 JSON of body, integratedTime, logID and logIndex.
- The bundle: protobuf-specs ``Bundle`` v0.3 in its JSON form, with the DSSE envelope.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PAYLOAD_TYPE = "application/vnd.in-toto+json"
ISSUER_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
ISSUER_V1_OID = x509.ObjectIdentifier("1.3.6.1.4.1.57264.1.1")  # deprecated; Fulcio writes both
SCT_LIST_OID = x509.ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
GITHUB = "https://token.actions.githubusercontent.com"
WORKFLOW = "https://github.com/org/repo/.github/workflows/build.yml@refs/heads/main"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def spki(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def log_id(key: ec.EllipticCurvePrivateKey) -> bytes:
    """A log's id: sha256 of its key's DER SubjectPublicKeyInfo (RFC 6962 section 3.2)."""
    return hashlib.sha256(spki(key)).digest()


def signed(key: ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    return key.sign(data, ec.ECDSA(hashes.SHA256()))


def der_octets(data: bytes) -> bytes:
    """``data`` as a DER OCTET STRING."""
    n = len(data)
    length = bytes([n]) if n < 128 else bytes([0x81, n]) if n < 256 else b"\x82" + n.to_bytes(2)
    return b"\x04" + length + data


def der_utf8(text: str) -> bytes:
    """``text`` as a DER UTF8String (a long-form length from 128 bytes on)."""
    data = text.encode()
    return b"\x0c" + der_octets(data)[1:]


def canonical(value: object) -> bytes:
    """RFC 8785 JSON of ``value`` (ASCII strings and integers only: sorted keys, no spaces)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding (DSSE spec, protocol.md)."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def key_usage(*, ca: bool) -> x509.KeyUsage:
    """A CA's key usage (certificate and CRL signing), else a signer's (digital signature)."""
    flags = dict.fromkeys(
        ["content_commitment", "key_encipherment", "data_encipherment", "key_agreement"], False
    )
    return x509.KeyUsage(
        digital_signature=not ca, key_cert_sign=ca, crl_sign=ca, encipher_only=False,
        decipher_only=False, **flags,
    )  # fmt: skip


def p256() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def tlog(key: ec.EllipticCurvePrivateKey, url: str, start: dt.datetime) -> dict[str, object]:
    return {
        "baseUrl": url,
        "hashAlgorithm": "SHA2_256",
        "publicKey": {
            "rawBytes": b64(spki(key)),
            "keyDetails": "PKIX_ECDSA_P256_SHA_256",
            "validFor": {"start": start.strftime("%Y-%m-%dT%H:%M:%SZ")},
        },
        "logId": {"keyId": b64(log_id(key))},
    }


def dsse_body(
    envelope: dict[str, object], payload: bytes, signature: bytes, cert: x509.Certificate
) -> bytes:
    """The canonical body Rekor logs for a DSSE envelope (its ``dsse`` v0.0.1 type)."""
    return canonical(
        {
            "apiVersion": "0.0.1",
            "kind": "dsse",
            "spec": {
                "envelopeHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(canonical(envelope)).hexdigest(),
                },
                "payloadHash": {
                    "algorithm": "sha256",
                    "value": hashlib.sha256(payload).hexdigest(),
                },
                "signatures": [
                    {
                        "signature": b64(signature),
                        "verifier": b64(cert.public_bytes(serialization.Encoding.PEM)),
                    }
                ],
            },
        }
    )


@dataclass
class SigstoreInstance:
    """One test Sigstore instance: its CA (``ca_key``, ``ca``), CT log and Rekor keys."""

    ca_key: ec.EllipticCurvePrivateKey
    ca: x509.Certificate
    ct_key: ec.EllipticCurvePrivateKey
    rekor_key: ec.EllipticCurvePrivateKey
    start: dt.datetime

    @classmethod
    def make(cls) -> SigstoreInstance:
        start = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
        ca_key = p256()
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "neuronbuild tests"),
                x509.NameAttribute(NameOID.COMMON_NAME, "test fulcio"),
            ]
        )
        ca = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(start + dt.timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(key_usage(ca=True), critical=True)
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        return cls(ca_key, ca, p256(), p256(), start)

    def trusted_root(self) -> dict[str, object]:
        """The instance's ``trusted_root.json`` (protobuf-specs TrustedRoot v0.1)."""
        return {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [tlog(self.rekor_key, "https://rekor.invalid", self.start)],
            "certificateAuthorities": [
                {
                    "subject": {"organization": "neuronbuild tests", "commonName": "test fulcio"},
                    "uri": "https://fulcio.invalid",
                    "certChain": {"certificates": [{"rawBytes": b64(self.ca.public_bytes(DER))}]},
                    "validFor": {"start": self.start.strftime("%Y-%m-%dT%H:%M:%SZ")},
                }
            ],
            "ctlogs": [tlog(self.ct_key, "https://ctfe.invalid", self.start)],
            "timestampAuthorities": [],
        }

    def write_root(self, path: Path) -> Path:
        path.write_text(json.dumps(self.trusted_root(), indent=1))
        return path

    def certificate(
        self,
        key: ec.EllipticCurvePublicKey,
        identity: str,
        issuer: str,
        not_before: dt.datetime,
        minutes: int = 10,
        ct_key: ec.EllipticCurvePrivateKey | None = None,
        claims: dict[str, str] | None = None,
    ) -> x509.Certificate:
        """A Fulcio-profile certificate for public ``key`` naming ``identity`` and ``issuer``,
        valid ``minutes`` from ``not_before``, with an SCT by the CT log key embedded (by
        ``ct_key`` instead, under the log's id, if given: a forged SCT). ``claims``: further
        extensions by dotted OID (Fulcio's ``1.3.6.1.4.1.57264.1.12`` source repository, ...),
        each a DER UTF8String as Fulcio writes them."""
        san: x509.GeneralName = (
            x509.UniformResourceIdentifier(identity)
            if "://" in identity
            else x509.RFC822Name(identity)
        )
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.ca.subject)
            .public_key(key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(not_before)
            .not_valid_after(not_before + dt.timedelta(minutes=minutes))
            .add_extension(key_usage(ca=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key), False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), False
            )
            .add_extension(x509.SubjectAlternativeName([san]), critical=True)
            .add_extension(x509.UnrecognizedExtension(ISSUER_V1_OID, issuer.encode()), False)
            .add_extension(x509.UnrecognizedExtension(ISSUER_OID, der_utf8(issuer)), False)
        )
        for oid, value in (claims or {}).items():
            ext = x509.UnrecognizedExtension(x509.ObjectIdentifier(oid), der_utf8(value))
            builder = builder.add_extension(ext, False)
        # The CT log signs the precertificate: this TBS is the final one less its last
        # extension, the SCT list (RFC 6962 section 3.2).
        tbs = builder.sign(self.ca_key, hashes.SHA256()).tbs_certificate_bytes
        millis = int(not_before.timestamp() * 1000)
        entry = hashlib.sha256(spki(self.ca_key)).digest() + len(tbs).to_bytes(3) + tbs
        signer = ct_key or self.ct_key
        signature = signed(signer, struct.pack("!BBQH", 0, 0, millis, 1) + entry + b"\0\0")
        sct = (
            b"\x00"
            + log_id(self.ct_key)
            + struct.pack("!QH", millis, 0)
            + struct.pack("!BBH", 4, 3, len(signature))  # sha256, ecdsa
            + signature
        )
        listed = struct.pack("!HH", len(sct) + 2, len(sct)) + sct
        ext = x509.UnrecognizedExtension(SCT_LIST_OID, der_octets(listed))
        return builder.add_extension(ext, False).sign(self.ca_key, hashes.SHA256())

    def logged(
        self, body: bytes, integrated: int, rogue: frozenset[str] = frozenset()
    ) -> dict[str, object]:
        """The bundle's tlog entry for ``body`` logged at ``integrated`` (seconds since the
        epoch) as entry 0 of a one-leaf log: inclusion proof, checkpoint and promise; those
        named in ``rogue`` (``checkpoint``, ``promise``) signed by a stranger's key instead."""
        stranger = p256()
        root = hashlib.sha256(b"\x00" + body).digest()  # a one-leaf tree: the leaf hash
        rekor = log_id(self.rekor_key)
        note = f"rekor.invalid - 1\n1\n{b64(root)}\n"
        note_key = stranger if "checkpoint" in rogue else self.rekor_key
        line = b64(rekor[:4] + signed(note_key, note.encode()))
        promise = canonical(
            {"body": b64(body), "integratedTime": integrated, "logID": rekor.hex(), "logIndex": 0}
        )
        return {
            "logIndex": "0",
            "logId": {"keyId": b64(rekor)},
            "kindVersion": {"kind": "dsse", "version": "0.0.1"},
            "integratedTime": str(integrated),
            "inclusionPromise": {
                "signedEntryTimestamp": b64(
                    signed(stranger if "promise" in rogue else self.rekor_key, promise)
                )
            },
            "inclusionProof": {
                "logIndex": "0",
                "rootHash": b64(root),
                "treeSize": "1",
                "hashes": [],
                "checkpoint": {"envelope": f"{note}\n\u2014 rekor.invalid {line}\n"},
            },
            "canonicalizedBody": b64(body),
        }

    def bundle(
        self,
        payload: bytes,
        identity: str = WORKFLOW,
        issuer: str = GITHUB,
        *,
        payload_type: str = PAYLOAD_TYPE,
        signed_at: dt.datetime | None = None,
        logged_at: dt.datetime | None = None,
        tamper: bytes | None = None,
        rogue: frozenset[str] = frozenset(),
        integrated: int | None = None,
        claims: dict[str, str] | None = None,
    ) -> bytes:
        """A Sigstore bundle (v0.3 JSON) of ``payload`` signed as ``identity`` (``issuer``):
        a fresh key, its certificate issued at ``signed_at`` (default a minute ago), logged at
        ``logged_at`` (default ``signed_at`` + 1 s). ``tamper``: the envelope carries this
        payload instead, under the signature of ``payload``. ``rogue``: the pieces (``sct``,
        ``checkpoint``, ``promise``) a stranger's key signs instead of the instance's;
        ``integrated``: the integrated time written, whatever ``logged_at`` says; ``claims``:
        the certificate's further extensions (:meth:`certificate`)."""
        signed_at = signed_at or dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
        logged_at = logged_at or signed_at + dt.timedelta(seconds=1)
        key = p256()
        ct_key = p256() if "sct" in rogue else None
        cert = self.certificate(
            key.public_key(), identity, issuer, signed_at, ct_key=ct_key, claims=claims
        )
        signature = signed(key, pae(payload_type, payload))
        carried = payload if tamper is None else tamper
        envelope = {
            "payload": b64(carried),
            "payloadType": payload_type,
            "signatures": [{"sig": b64(signature), "keyid": ""}],
        }
        body = dsse_body(envelope, carried, signature, cert)
        when = int(logged_at.timestamp()) if integrated is None else integrated
        entry = self.logged(body, when, rogue)
        return json.dumps(
            {
                "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                "verificationMaterial": {
                    "certificate": {"rawBytes": b64(cert.public_bytes(DER))},
                    "tlogEntries": [entry],
                },
                "dsseEnvelope": envelope,
            }
        ).encode()


DER = serialization.Encoding.DER
