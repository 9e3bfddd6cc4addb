"""The keys a trust policy names for a signer (``signers.<name>.keys``), read into verification
keys.

Each entry is one of:

- ``PATH``: a PEM public key file (Ed25519 or ECDSA P-256), relative to the policy's folder;
- ``{file: PATH, keyid: HEX}``: that file, its fingerprint pinned (securesystemslib's keyid, the
  64 hex ``neuronbuild sign`` prints): a file that holds another key is refused, so a swapped
  ``.pub`` beside the policy cannot widen it;
- ``{file: PATH, expires: 2027-06-30}`` (with ``keyid`` or ``kms`` too): a key that verifies
  nothing from that date (UTC midnight; or a full timestamp) on: keys are rotated by listing the
  next key beside the current one, then letting the current one expire;
- ``{kms: awskms:ARN, file: PATH}`` (``keyid`` optional too): an AWS KMS key
  (:mod:`neuronbuild.attest.kms`) and its public key, fetched once with KMS's GetPublicKey and
  pinned in the file. Nodes verify offline: they never call KMS, so need neither network to it
  nor credentials. The ARN names the signer in refusals.

- ``{identity: ID, issuer: URL}`` (``trusted_root: PATH`` optional, and the certificate
  claims ``source_repository``, ``source_repository_ref``, ``build_trigger``, ``build_config``
  it must carry, :data:`~neuronbuild.attest.keyless.CLAIMS`): a Sigstore keyless signer
  (:mod:`neuronbuild.attest.keyless`), the certificate identity (email or URI SAN, e.g.
  ``https://github.com/ORG/REPO/.github/workflows/build.yml@refs/heads/main``) and OIDC issuer
  (``https://token.actions.githubusercontent.com``) Fulcio certified, checked offline against
  the trusted root in that file, else Sigstore's public-good root as the installed sigstore
  release ships it. ``expires: DATE`` on it voids the signatures Rekor logged from then on and
  keeps those logged before (Rekor's time is trusted; a key's signature states none).

A keyid or an ARN alone is refused: a fingerprint cannot check a signature, and fetching the
key at verification time would make every node depend on KMS.
"""

from __future__ import annotations

import calendar
import datetime
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import Key

from neuronbuild.attest.keyless import CLAIMS, KeylessIdentity
from neuronbuild.attest.keys import load_public_key
from neuronbuild.errors import UserError

KEYID = re.compile(r"[0-9a-f]{64}")
"""A pinned keyid: securesystemslib's default, sha256 hex of the public key's canonical form."""

KEY_FIELDS = {"file", "keyid", "kms", "expires"}
KEYLESS_FIELDS = {"identity", "issuer", "trusted_root", *CLAIMS}
"""The fields of a keyless (Sigstore) signer: the certificate's identity and OIDC issuer, and
the trusted root they are checked against (optional)."""

FORMS = (
    "PATH, {file: PATH, keyid: HEX}, {kms: awskms:ARN, file: PATH} or "
    "{identity: ID, issuer: URL[, trusted_root: PATH]}"
)
"""The key entries a policy accepts, for messages."""


@dataclass(frozen=True)
class TrustedKey:
    """A verification ``key`` a policy names, and the AWS KMS key ARN (``kms``) that holds its
    private half, if the policy says so."""

    key: Key
    kms: str | None = None
    expires: float | None = None
    """When the key stops verifying anything (seconds since the epoch, by the node's clock), or
    None: never. A key to retire is given an ``expires`` date; a stolen one is revoked."""

    def name(self) -> str:
        """``key <keyid, 16 hex>``, and `` at <ARN>`` for a KMS key: how refusals name it."""
        head = f"key {str(self.key.keyid)[:16]}"
        return f"{head} at {self.kms}" if self.kms else head


PATTERN_CHARACTERS = frozenset("*^$[]()|\\")
"""Characters of a regular expression or glob that no certificate identity (an email or a
workflow URI) holds: an identity written with them never matches (cosign's
``--certificate-identity-regexp`` is another flag; a policy compares exactly)."""


def keyless_identity(entry: dict[str, Any], folder: Path, field: str) -> KeylessIdentity:
    """The keyless signer ``entry`` names (``identity``, ``issuer``, ``trusted_root``, the
    required certificate claims, and ``expires``: :attr:`~.keyless.KeylessIdentity.expires`).

    Raises:
        UserError: other fields, an identity or issuer that is not a non-empty string, an issuer
            that is not an https URL, or a trusted root that is unreadable or not one.
    """
    from neuronbuild.attest.keyless import trusted_root

    if not set(entry) <= KEYLESS_FIELDS | {"expires"} or not {"identity", "issuer"} <= set(entry):
        raise UserError(
            f"{field}: a keyless signer is exactly {{identity: ID, issuer: URL}}, "
            "and trusted_root: PATH if not Sigstore's public-good instance, and at most "
            f"expires, {', '.join(CLAIMS)} besides"
        )
    expires = expiry(entry.get("expires"), f"{field}.expires")
    claims = tuple((name, entry[name]) for name in CLAIMS if name in entry)
    for name, value in claims:
        if not isinstance(value, str) or not value.strip() or PATTERN_CHARACTERS & set(value):
            raise UserError(
                f"{field}.{name}: expected the exact value the certificate carries (compared "
                "exactly, not as a pattern)"
            )
    identity, issuer, root = entry["identity"], entry["issuer"], entry.get("trusted_root")
    if not isinstance(identity, str) or not identity.strip():
        raise UserError(f"{field}.identity: expected the certificate's email or URI")
    if PATTERN_CHARACTERS & set(identity):
        raise UserError(
            f"{field}.identity {identity!r}: compared exactly, not as a pattern; give the whole "
            "identity the certificate names (e.g. https://github.com/ORG/REPO/.github/workflows/"
            "build.yml@refs/heads/main)"
        )
    if not isinstance(issuer, str) or not issuer.startswith("https://"):
        raise UserError(f"{field}.issuer: expected the OIDC issuer's https:// URL")
    if issuer.endswith("/"):
        raise UserError(
            f"{field}.issuer {issuer!r}: compared exactly, and issuers are named without a "
            f"trailing /; write {issuer.rstrip('/')}"
        )
    if root is not None and not isinstance(root, str):
        raise UserError(f"{field}.trusted_root: expected the PATH of a trusted_root.json")
    path = None if root is None else folder / root
    try:
        trusted_root(path)  # read now: a bad root is the policy's error, not each serve's
    except UserError as exc:
        raise UserError(f"{field}.{exc}") from None
    return KeylessIdentity(identity, issuer, path, claims, expires)


def trusted_key(entry: Any, folder: Path, field: str) -> TrustedKey | KeylessIdentity:
    """The key, or keyless identity, policy entry ``entry`` (at ``field``, files relative to
    ``folder``) names.

    Raises:
        UserError: one line naming ``field``: an entry of another shape, a file that cannot be
            read or holds no Ed25519 / ECDSA P-256 public key, a keyid that is not 64 hex or not
            the file's, an ARN that is no KMS key ARN, a KMS key that is not ECDSA P-256, a
            keyid or ARN without its file; for a keyless entry, see :func:`keyless_identity`.
    """
    if isinstance(entry, str):
        return TrustedKey(load_public_key(folder / entry, field))
    if isinstance(entry, dict) and KEYLESS_FIELDS & set(entry):
        return keyless_identity(entry, folder, field)
    if not isinstance(entry, dict) or not entry or not set(entry) <= KEY_FIELDS:
        raise UserError(f"{field}: expected one of {FORMS}")
    path, keyid, kms = entry.get("file"), entry.get("keyid"), entry.get("kms")
    expires = expiry(entry.get("expires"), f"{field}.expires")
    arn = None
    if kms is not None:
        from neuronbuild.attest.kms import kms_arn

        if not isinstance(kms, str):
            raise UserError(f"{field}.kms: expected awskms:ARN")
        arn = kms_arn(kms, f"{field}.kms")
    if keyid is not None and not (isinstance(keyid, str) and KEYID.fullmatch(keyid)):
        raise UserError(f"{field}.keyid: expected the 64 lowercase hex digits of a keyid")
    if not isinstance(path, str):
        named = "an ARN" if arn else "a keyid"
        raise UserError(
            f"{field}: {named} alone cannot verify a signature offline; add file: PATH of its "
            "PEM public key" + (" (aws kms get-public-key, once)" if arn else "")
        )
    key = load_public_key(folder / path, f"{field}.file")
    if keyid is not None and key.keyid != keyid:
        raise UserError(
            f"{field}.file {folder / path}: holds key {key.keyid}, not the pinned keyid {keyid}"
        )
    if arn is not None and key.scheme != "ecdsa-sha2-nistp256":
        raise UserError(
            f"{field}.file {folder / path}: holds a key of type {key.keytype}, but a KMS "
            "signer's key is ECC_NIST_P256 (ECDSA P-256)"
        )
    return TrustedKey(key, arn, expires)


def expiry(value: Any, field: str) -> float | None:
    """A key's ``expires``: a YAML date (UTC midnight) or timestamp (a naive one is UTC), as
    seconds since the epoch; None where absent.

    Raises:
        UserError: anything else, naming ``field``.
    """
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc)
        return aware.timestamp()
    if isinstance(value, datetime.date):
        return float(calendar.timegm(value.timetuple()))
    raise UserError(f"{field}: expected a date (2027-06-30) or a timestamp, not {value!r}")
