"""Signing and verification keys: the signer a KEY_REF names (a private key file, or an AWS KMS
key through :mod:`neuronbuild.attest.kms`), the public key files a policy trusts, and the
fingerprint (keyid) that names a signer.

A keyid is securesystemslib's default: the sha256 (hex) of the canonical JSON of the public key's
``{"keytype", "scheme", "keyval"}`` (``securesystemslib.signer._utils.compute_default_keyid``), so
the same public key has the same keyid wherever it is loaded. Supported: Ed25519 and ECDSA P-256
(scheme ``ecdsa-sha2-nistp256``), PEM-encoded (PKCS#8 private keys, SubjectPublicKeyInfo public
keys, as ``openssl genpkey`` and ``cosign``-independent tools write them).
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.serialization import load_pem_private_key, load_pem_public_key
from securesystemslib.signer import CryptoSigner, Signer, SSlibKey

from neuronbuild.attest.files import read_small_file
from neuronbuild.attest.keyless_sign import KeylessSigner
from neuronbuild.errors import UserError

MAX_KEY_BYTES = 64 << 10
"""Largest key file read (bytes); a PEM key is well under 1 KiB."""

KEY_REF_HELP = (
    "file:PATH or PATH of a PEM private key (Ed25519 or ECDSA P-256), awskms:ARN of an AWS "
    "KMS key (ECC_NIST_P256), or sigstore: (keyless, as the CI job's OIDC identity)"
)


def _read(path: Path, what: str) -> bytes:
    return read_small_file(path, MAX_KEY_BYTES, what, "a PEM key file")


def _supported(key: object) -> bool:
    if isinstance(key, ed25519.Ed25519PrivateKey | ed25519.Ed25519PublicKey):
        return True
    return isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey) and isinstance(
        key.curve, ec.SECP256R1
    )


def _kind(key: object) -> str:
    """What a key is, for messages: ``an RSA key``, ``an ECDSA key on secp384r1``, ..."""
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        return f"an ECDSA key on {key.curve.name}"
    name = type(key).__name__.lstrip("_")
    for suffix in ("PrivateKey", "PublicKey"):
        name = name.removesuffix(suffix)
    return f"a key of type {name}"


def key_path(key_ref: str, option: str = "--sign") -> Path:
    """The file a ``--sign``/``--key`` KEY_REF names: ``file:PATH`` or a bare ``PATH``.

    Raises:
        UserError: no path (``file:``, an empty value: ``Path("")`` would read as ``.``), or
            another scheme (``awskms:`` and ``sigstore:`` are :func:`load_signer`'s).
    """
    scheme, sep, rest = key_ref.partition(":")
    if not key_ref or (sep and scheme == "file" and not rest):
        raise UserError(f"{option} {key_ref!r}: names no file; give {KEY_REF_HELP}")
    if sep and scheme == "file":
        return Path(rest)
    if sep and len(scheme) > 1 and "/" not in scheme:
        raise UserError(f"{option} {key_ref!r}: unknown key scheme {scheme!r}; give {KEY_REF_HELP}")
    return Path(key_ref)


def load_signer(key_ref: str, option: str = "--sign") -> Signer | KeylessSigner:
    """The signer KEY_REF names: ``awskms:ARN`` (:func:`neuronbuild.attest.kms.kms_signer`,
    which asks KMS for the public key now), ``sigstore:[staging|PATH]`` (keyless:
    :func:`neuronbuild.attest.keyless_sign.keyless_signer`, which finds the OIDC token now), else
    the private key file of :func:`key_path`.

    Raises:
        UserError: the file cannot be read, is not an unencrypted PEM private key, or holds
            another kind of key than Ed25519 or ECDSA P-256 (``option`` names the option); for
            KMS, see :func:`~neuronbuild.attest.kms.kms_signer` (StoreError: KMS unreachable);
            for keyless, :func:`~neuronbuild.attest.keyless_sign.keyless_signer`.
    """
    if key_ref.startswith("awskms:"):
        from neuronbuild.attest.kms import kms_signer

        return kms_signer(key_ref, option)
    if key_ref.startswith("sigstore:"):
        from neuronbuild.attest.keyless_sign import keyless_signer

        return keyless_signer(key_ref, option)
    path = key_path(key_ref, option)
    if key_ref in ("sigstore", "keyless") and not path.exists():
        raise UserError(
            f"{option} {key_ref!r}: no such key file; to sign keyless as the CI job's OIDC "
            "identity, write sigstore: (with the colon)"
        )
    data = _read(path, option)
    try:
        private = load_pem_private_key(data, password=None)
    except TypeError:
        raise UserError(
            f"{option} {path}: the key is encrypted; give an unencrypted PEM private key"
        ) from None
    except Exception as exc:  # ValueError, cryptography's UnsupportedAlgorithm
        raise UserError(
            f"{option} {path}: not a PEM private key ({type(exc).__name__}); give {KEY_REF_HELP}"
        ) from None
    if not _supported(private):
        raise UserError(f"{option} {path}: {_kind(private)}; give {KEY_REF_HELP}")
    return CryptoSigner(private)


def load_public_key(path: Path, what: str) -> SSlibKey:
    """The public key in PEM file ``path`` (``what`` names it in messages, e.g. the policy's
    field).

    Raises:
        UserError: unreadable, not a PEM public key, or not Ed25519 / ECDSA P-256.
    """
    data = _read(path, what)
    try:
        public = load_pem_public_key(data)
    except Exception as exc:  # ValueError, UnsupportedAlgorithm
        raise UserError(
            f"{what} {path}: not a PEM public key ({type(exc).__name__}); give the .pub file "
            "of an Ed25519 or ECDSA P-256 key"
        ) from None
    if not _supported(public):
        raise UserError(f"{what} {path}: {_kind(public)}, not Ed25519 or ECDSA P-256")
    return SSlibKey.from_crypto(public)
