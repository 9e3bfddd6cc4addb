"""An AWS KMS asymmetric key as a signer (``--sign awskms:ARN``): KMS holds the private key and
makes every signature; neuronbuild only asks it (boto3) and never sees the key.

The key must be ``ECC_NIST_P256`` with ``SIGN_VERIFY`` usage and sign ``ECDSA_SHA_256``: its
signatures are securesystemslib's ``ecdsa-sha2-nistp256`` (DER, as KMS returns them), so a node
verifies them with the public key alone, offline (:mod:`neuronbuild.attest.trusted_keys`). The
key is named by its key ARN, ``arn:aws:kms:<region>:<account>:key/<key id>``; the client is made
for the ARN's region, with boto3's usual credentials (environment, profile, instance role) and
endpoint settings (``AWS_ENDPOINT_URL_KMS``). IAM: ``kms:GetPublicKey`` and ``kms:Sign``.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from securesystemslib.signer import Key, SecretsHandler, Signature, Signer, SSlibKey

from neuronbuild.errors import StoreError, UserError

SCHEME = "awskms"
"""The KEY_REF scheme of a KMS key: ``awskms:<key ARN>`` (securesystemslib's ``AWSSigner``'s)."""

KEY_ARN = re.compile(
    r"arn:aws(?:-[a-z]+)*:kms:(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+):\d{12}:key/[A-Za-z0-9-]{1,64}"
)
"""A KMS key ARN (AWS General Reference, "Amazon Resource Names": the key's id after ``key/``,
``mrk-`` for a multi-Region key). An alias ARN is refused: an alias can be moved to another key
by anyone allowed to, so it is no name for a signer."""

KEY_SPEC = "ECC_NIST_P256"
ALGORITHM = "ECDSA_SHA_256"

RAW_MESSAGE_BYTES = 4096
"""The longest message KMS's Sign takes with ``MessageType=RAW`` (KMS API reference, Sign,
``Message``: "up to 4096 bytes"); a longer one is sent as its SHA-256 digest."""


def kms_arn(key_ref: str, what: str) -> str:
    """The key ARN of ``awskms:ARN``.

    Raises:
        UserError: another scheme, or an ARN that is no KMS key ARN (``what`` names the option
            or policy field).
    """
    scheme, _, arn = key_ref.partition(":")
    if scheme != SCHEME or not KEY_ARN.fullmatch(arn):
        raise UserError(
            f"{what} {ascii(key_ref)[:160]}: expected awskms:arn:aws:kms:REGION:ACCOUNT:key/ID "
            "(a KMS key ARN; not an alias, which can be moved to another key)"
        )
    return arn


def _region(arn: str) -> str:
    match = KEY_ARN.fullmatch(arn)
    assert match is not None  # kms_arn checked it
    return match["region"]


def _failure(arn: str, action: str, exc: Exception) -> Exception:
    """The one-line error of a KMS call that failed: the key's or the caller's fault (exit 2)
    for KMS's client errors and missing credentials, the network's (exit 3) otherwise."""
    from botocore.exceptions import ClientError, NoCredentialsError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code, message = error.get("Code", "?"), ascii(str(error.get("Message", "")))[:160]
        return UserError(f"KMS key {arn}: KMS refused {action} ({code}: {message})")
    if isinstance(exc, NoCredentialsError):
        return UserError(f"KMS key {arn}: no AWS credentials found; set them as for the aws CLI")
    return StoreError(f"KMS key {arn}: KMS unreachable for {action} ({ascii(str(exc))[:160]})")


class KmsSigner(Signer):
    """Signs with the KMS key ``arn`` whose public half is ``public_key``, through ``client``
    (a boto3 KMS client of the key's region).

    Why not securesystemslib's ``AWSSigner``: it always sends the SHA-256 digest
    (``MessageType=DIGEST``), and moto's KMS, which the tests sign against, does not implement
    DIGEST (moto 5.2.5, ``moto/kms/models.py``: it signs the digest as if it were the message,
    so no signature would verify). This signer sends the message itself (``RAW``: KMS hashes it
    and signs) whenever KMS accepts it, up to :data:`RAW_MESSAGE_BYTES`, which covers a DSSE
    envelope's PAE of every statement short of a very large recipe; a longer one is sent as
    ``DIGEST``, as ``AWSSigner`` does. Both make the same signature (ECDSA over the SHA-256 of
    the message, DER-encoded); KMS does all the cryptography.
    """

    def __init__(self, arn: str, public_key: SSlibKey, client: Any) -> None:
        self.arn = arn
        self._public_key = public_key
        self.client = client

    @property
    def public_key(self) -> Key:
        """The key's public half, as KMS's GetPublicKey gave it."""
        return self._public_key

    @classmethod
    def from_priv_key_uri(
        cls, priv_key_uri: str, public_key: Key, secrets_handler: SecretsHandler | None = None
    ) -> KmsSigner:
        """The signer of ``awskms:ARN`` (securesystemslib's URI interface), asking KMS for the
        public key (``public_key`` must be it).

        Raises:
            UserError: a bad URI, a key of another kind, or a KMS refusal; StoreError: KMS
                unreachable.
        """
        signer = kms_signer(priv_key_uri, "--sign")
        if signer.public_key != public_key:
            raise UserError(f"--sign {priv_key_uri}: KMS holds another key than the one given")
        return signer

    def sign(self, payload: bytes) -> Signature:
        """KMS's ``ECDSA_SHA_256`` signature of ``payload`` (its bytes, or their SHA-256 when
        over :data:`RAW_MESSAGE_BYTES`).

        Raises:
            UserError: KMS refused (access denied, key disabled, ...); StoreError: KMS
                unreachable.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        raw = len(payload) <= RAW_MESSAGE_BYTES
        try:
            response = self.client.sign(
                KeyId=self.arn,
                Message=payload if raw else hashlib.sha256(payload).digest(),
                MessageType="RAW" if raw else "DIGEST",
                SigningAlgorithm=ALGORITHM,
            )
        except (BotoCoreError, ClientError) as exc:
            raise _failure(self.arn, "to sign", exc) from None
        return Signature(str(self._public_key.keyid), bytes(response["Signature"]).hex())


def kms_signer(key_ref: str, option: str = "--sign") -> KmsSigner:
    """The signer of KEY_REF ``awskms:ARN``: its public key asked of KMS once (GetPublicKey).

    Raises:
        UserError: boto3 is not installed, a bad ARN, a key that is not ``ECC_NIST_P256`` for
            ``SIGN_VERIFY`` with ``ECDSA_SHA_256``, or KMS refused (no such key, access denied,
            no credentials); StoreError: KMS unreachable.
    """
    arn = kms_arn(key_ref, option)
    try:
        import boto3
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:
        raise UserError(
            f"{option} {key_ref}: signing with AWS KMS needs boto3; pip install 'neuronbuild[kms]'"
        ) from None
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    client = boto3.client("kms", region_name=_region(arn))
    try:
        response = client.get_public_key(KeyId=arn)
    except (BotoCoreError, ClientError) as exc:
        raise _failure(arn, "GetPublicKey", exc) from None
    # The key's kind is read off its public key, not KeySpec: moto 5.2.5 answers only the
    # deprecated CustomerMasterKeySpec, and the public key is what a node verifies with anyway.
    # ECDSA_SHA_256 among its algorithms means a signing key (ECC_SECG_P256K1 signs it too).
    try:
        public = load_der_public_key(response["PublicKey"])
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"{option} {key_ref}: KMS gave no public key ({type(exc).__name__})"
        ) from None
    usage, algorithms = response.get("KeyUsage"), response.get("SigningAlgorithms") or []
    spec = response.get("KeySpec") or response.get("CustomerMasterKeySpec")
    if (
        not isinstance(public, ec.EllipticCurvePublicKey)
        or not isinstance(public.curve, ec.SECP256R1)
        or ALGORITHM not in algorithms
    ):
        raise UserError(
            f"{option} {key_ref}: KeySpec {spec}, KeyUsage {usage}; give an {KEY_SPEC} key "
            f"for SIGN_VERIFY ({ALGORITHM})"
        )
    return KmsSigner(arn, SSlibKey.from_crypto(public), client)
