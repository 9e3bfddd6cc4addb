"""Sigstore keyless attestations: the same DSSE envelope of the same Statement, inside a Sigstore
bundle (v0.3) whose signature is by a short-lived Fulcio certificate for the CI job's OIDC
identity, logged in Rekor.

Everything Sigstore is sigstore-python's (4.x, the ``sigstore`` extra): signing
(:mod:`neuronbuild.attest.keyless_sign`), and here reading bundles and verifying them
with :class:`sigstore.verify.Verifier` under a :class:`sigstore.verify.policy.Identity` (the
certificate's SAN and its OIDC issuer extension). Nodes verify offline: the trusted root (Fulcio
CAs, Rekor and CT log keys) is a file the policy pins, or Sigstore's public-good root as the
installed sigstore release ships it; Sigstore's services are never called to verify.

A keyless attestation is stored as ``attestations/<manifest>/<name>.json`` where ``name`` is
:func:`keyless_name` of the identity and issuer the certificate names, so signing again as the
same CI identity replaces the attestation, as signing again with the same key does.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronbuild.attest.files import read_small_file
from neuronbuild.attest.statement import iso_time
from neuronbuild.errors import StoreDataInvalid, UserError

if TYPE_CHECKING:
    from sigstore.models import Bundle, TrustedRoot

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
"""The media type of the bundles written (protobuf-specs ``Bundle`` v0.3)."""
BUNDLE_MEDIA_TYPES = (
    "application/vnd.dev.sigstore.bundle+json;version=0.1",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    BUNDLE_MEDIA_TYPE,
)
"""The media types of Sigstore bundles (protobuf-specs), as sigstore-python reads them."""
BUNDLE_PREFIX = "application/vnd.dev.sigstore.bundle"
"""Every Sigstore bundle's media type starts so (0.1, 0.2, 0.3); an envelope has no
``mediaType`` at all."""

OIDC_ISSUER_OIDS = ("1.3.6.1.4.1.57264.1.1", "1.3.6.1.4.1.57264.1.8")
"""Fulcio's OIDC issuer extensions: v1 (raw bytes; the one sigstore-python's ``Identity``
checks, read first) and v2 (a DER UTF8String). Fulcio writes both."""

MAX_TRUSTED_ROOT_BYTES = 1 << 20
"""Largest trusted root file read (bytes); Sigstore's public-good root is about 8 KiB."""


def first_line(exc: BaseException, limit: int = 120) -> str:
    """The first line of ``exc``'s message (its type's name when empty), printable, at most
    ``limit`` characters: sigstore's and pydantic's errors run to many lines. For a pydantic
    ``ValidationError``, its first error: the field's path and what is wrong with it."""
    for each in (exc, exc.__cause__):  # sigstore wraps pydantic's error as its cause
        errors = getattr(each, "errors", None)
        if callable(errors):
            with contextlib.suppress(Exception):
                first = errors()[0]
                where = ".".join(str(part) for part in first["loc"])
                return ascii(f"{where}: {first['msg']}")[1:-1][:limit]
    lines = str(exc).strip().splitlines()
    if not lines and exc.__cause__ is not None:  # e.g. FulcioClientError from an HTTPError
        return first_line(exc.__cause__, limit)
    return ascii(lines[0] if lines else type(exc).__name__)[1:-1][:limit]


def keyless_name(identity: str, issuer: str) -> str:
    """The 64 hex name a keyless attestation is stored under: sha256 of ``issuer``, a newline
    and ``identity`` (one attestation per CI identity and manifest)."""
    return hashlib.sha256(f"{issuer}\n{identity}".encode()).hexdigest()


def is_bundle(raw: Any) -> bool:
    """Whether parsed JSON ``raw`` claims to be a Sigstore bundle (its ``mediaType``)."""
    return isinstance(raw, dict) and str(raw.get("mediaType", "")).startswith(BUNDLE_PREFIX)


def certificate_identity(bundle: Bundle) -> tuple[str, str]:
    """``(identity, issuer)`` the bundle's signing certificate claims (unverified), printable
    for messages: :func:`claimed_identity`, each escaped (:func:`ascii`) and cut to 200."""
    identity, issuer = claimed_identity(bundle)
    return ascii(identity)[1:-1][:200], ascii(issuer)[1:-1][:200]


def claimed_identity(bundle: Bundle) -> tuple[str, str]:
    """``(identity, issuer)`` the bundle's signing certificate claims (unverified): its first
    email or URI SAN (Fulcio writes one; Sigstore's other-name SANs are not read, so such a
    certificate is never a policy's signer), and its OIDC issuer extension (``?`` where
    absent)."""
    from cryptography import x509

    try:  # a hostile certificate's extensions may not parse: nothing is claimed then
        extensions = bundle.signing_certificate.extensions
    except ValueError:
        return "?", "?"
    identity = "?"
    try:
        sans = extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        found = sans.get_values_for_type(x509.RFC822Name) + sans.get_values_for_type(
            x509.UniformResourceIdentifier
        )
        identity = found[0] if found else "?"
    except x509.ExtensionNotFound:
        pass
    issuer = "?"
    for oid in OIDC_ISSUER_OIDS:
        try:
            value = extensions.get_extension_for_oid(x509.ObjectIdentifier(oid)).value
        except x509.ExtensionNotFound:
            continue
        raw = bytes(getattr(value, "value", b""))
        if oid == OIDC_ISSUER_OIDS[1] and raw[:1] == b"\x0c" and len(raw) > 1:  # UTF8String
            skip = 2 if raw[1] < 0x80 else 2 + (raw[1] & 0x7F)  # its DER length's bytes
            raw = raw[skip:]
        issuer = raw.decode(errors="replace")
        break
    return identity, issuer


def read_bundle(data: bytes, what: str) -> Bundle:
    """The Sigstore bundle in ``data`` (sigstore-python's parser: its structure, one tlog entry
    with an inclusion proof and checkpoint), not yet verified.

    Raises:
        StoreDataInvalid: not a bundle sigstore-python reads, or one holding no DSSE envelope.
        UserError: sigstore-python is not installed (``neuronbuild[sigstore]``).
    """
    require_sigstore(what)
    from sigstore.models import Bundle

    try:
        bundle = Bundle.from_json(data)
    except Exception as exc:  # InvalidBundle, pydantic's ValidationError, ValueError
        raise StoreDataInvalid(f"{what}: not a Sigstore bundle ({first_line(exc, 80)})") from None
    if bundle._inner.dsse_envelope is None:  # a message signature bundle signs no Statement
        raise StoreDataInvalid(f"{what}: a Sigstore bundle without a DSSE envelope")
    return bundle


def require_sigstore(what: str) -> None:
    try:
        import sigstore  # noqa: F401
    except ImportError:
        raise UserError(
            f"{what}: Sigstore keyless signatures need sigstore-python; "
            "pip install 'neuronbuild[sigstore]'"
        ) from None


@functools.lru_cache(maxsize=8)
def trusted_root(path: Path | None) -> TrustedRoot:
    """The Sigstore trusted root in file ``path`` (a ``trusted_root.json``, or a client trust
    config holding one, as ``sigstore:PATH`` takes), or (None) the public-good root embedded in
    the installed sigstore release. That one is read from the package itself, never from the
    TUF cache under the user's home (which ``ClientTrustConfig.production(offline=True)`` would
    prefer): whoever can write a node user's cache must not choose its trust anchor.

    Raises:
        UserError: sigstore-python missing, or ``path`` unreadable or holding no trusted root.
    """
    require_sigstore(f"trusted_root {path}" if path else "keyless signer")
    from sigstore._internal.tuf import DEFAULT_TUF_URL
    from sigstore._utils import read_embedded  # sigstore <5 pinned: its layout is known
    from sigstore.models import TrustedRoot
    from sigstore_models.trustroot.v1 import ClientTrustConfig
    from sigstore_models.trustroot.v1 import TrustedRoot as Inner

    if path is None:
        return TrustedRoot(Inner.from_json(read_embedded("trusted_root.json", DEFAULT_TUF_URL)))
    data = read_small_file(path, MAX_TRUSTED_ROOT_BYTES, "trusted_root", "a Sigstore trusted root")
    try:
        return TrustedRoot(Inner.from_json(data))
    except Exception as first:  # pydantic's ValidationError, sigstore's Error
        try:
            return TrustedRoot(ClientTrustConfig.from_json(data).trusted_root)
        except Exception:
            reason = first_line(first, 80)
    raise UserError(
        f"trusted_root {path}: not a Sigstore trusted root ({reason}); give the "
        "trusted_root.json of the Sigstore instance that signs"
    )


CLAIMS = {
    "source_repository": "OIDCSourceRepositoryURI",
    "source_repository_ref": "OIDCSourceRepositoryRef",
    "build_trigger": "OIDCBuildTrigger",
    "build_config": "OIDCBuildConfigURI",
}
"""The Fulcio certificate extensions a policy may require of a keyless signer (sigstore-python's
policy class for each; Fulcio's OIDs 1.3.6.1.4.1.57264.1.12, .14, .20 and .18, each a DER
UTF8String): the source repository URI (``https://github.com/ORG/REPO``), its ref
(``refs/heads/main``), the event that triggered the build (``push``) and the build
configuration, the calling workflow at its ref
(``https://github.com/ORG/REPO/.github/workflows/release.yml@refs/heads/main``)."""


@dataclass(frozen=True)
class KeylessIdentity:
    """A keyless signer a policy names: the certificate ``identity`` (its email or URI SAN,
    e.g. a GitHub Actions workflow ref) and OIDC ``issuer``, checked against the Sigstore
    trusted root in file ``root`` (None: Sigstore's public-good root)."""

    identity: str
    issuer: str
    root: Path | None = None
    claims: tuple[tuple[str, str], ...] = ()
    """Further certificate extensions the certificate must carry, as ``(field, value)`` pairs
    of :data:`CLAIMS` (``source_repository``, ...), as cosign's ``--certificate-github-*``
    flags require them: a reusable workflow's identity is the same whichever repository calls
    it, so these name the caller."""
    expires: float | None = None
    """From when (seconds since the epoch) a signature of this identity counts for nothing, by
    the time Rekor logged it (:func:`logged_time`, a trusted time), or None: never. Set at a
    compromise, it revokes what was signed after it and keeps every build signed before; a
    signature stating no trusted time counts for nothing once this time has passed on the node."""

    def void_at(self, logged: float | None, now: float) -> str | None:
        """Why a signature of this identity logged at ``logged`` counts for nothing (the node's
        clock at ``now`` where it states no trusted time), else None."""
        if self.expires is None:
            return None
        until = iso_time(self.expires)
        if logged is None and now >= self.expires:
            return f"stating no trusted time, of an identity that expired {until} (expires)"
        if logged is not None and logged >= self.expires:
            return f"logged {iso_time(logged)}, after its identity expired {until} (expires)"
        return None

    def name(self) -> str:
        """``identity <identity> (issuer <issuer>)``, then each required claim: how refusals
        name it."""
        extra = "".join(f", {field} {value}" for field, value in self.claims)
        return f"identity {self.identity} (issuer {self.issuer}{extra})"

    def claimed_by(self, bundle: Bundle) -> bool:
        """Whether ``bundle``'s certificate claims this identity and issuer (unverified)."""
        return claimed_identity(bundle) == (self.identity, self.issuer)

    def verify(self, bundle: Bundle) -> tuple[str, bytes]:
        """``(payload type, payload)`` of ``bundle``'s DSSE envelope once sigstore-python's
        :meth:`~sigstore.verify.Verifier.verify_dsse` holds: the certificate chains to a Fulcio
        CA of the trusted root at the logged time, its SCT verifies, it names this identity and
        issuer, the Rekor entry's inclusion proof, checkpoint and promise verify, and the
        envelope's signature is the certificate's key's.

        Raises:
            UserError: the first check that fails, in one line (sigstore's reason); anything
                sigstore raises on hostile values (an OverflowError for an integrated time past
                any date, ...) is such a failure too.
        """
        from sigstore.verify import Verifier
        from sigstore.verify import policy as policies

        verifier = Verifier(trusted_root=trusted_root(self.root))
        policy: Any = policies.Identity(identity=self.identity, issuer=self.issuer)
        if self.claims:
            required = [getattr(policies, CLAIMS[f])(value) for f, value in self.claims]
            policy = policies.AllOf([policy, *required])
        try:
            return verifier.verify_dsse(bundle, policy)
        except Exception as exc:  # Error, ValueError, and what hostile values raise inside it
            raise UserError(first_line(exc)) from None


def logged_time(bundle: Bundle) -> float | None:
    """When Rekor logged ``bundle``'s signature (its entry's integrated time, seconds since the
    epoch), where its inclusion promise (the SET, which sigstore-python's verifier checks) signs
    that time: a keyless signature's trusted time (a key's is only its signer's claim). None
    where the entry carries no promise (an inclusion proof alone does not cover the time, so a
    store writer could set it) or no time: such a signature "states no time"."""
    try:
        entry = bundle.log_entry._inner
        value = entry.integrated_time
        return float(value) if value and entry.inclusion_promise else None
    except (AttributeError, TypeError, ValueError):
        return None


def first_verifying(
    bundle: Bundle, identities: list[KeylessIdentity]
) -> tuple[KeylessIdentity | None, str | None]:
    """``(identity, None)`` for the first of ``identities`` whose claim ``bundle``'s certificate
    makes and whose check holds (:meth:`KeylessIdentity.verify`); else ``(None, why)``: the
    first failure among those it claims, None when it claims none of them. The same identity
    may be named twice, under an old and a new root, while a root is rotated: each is tried."""
    failed = None
    for identity in identities:
        if not identity.claimed_by(bundle):
            continue
        try:
            identity.verify(bundle)
        except UserError as exc:
            failed = failed or str(exc)
            continue
        return identity, None
    return None, failed
