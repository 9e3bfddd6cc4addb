"""Sigstore keyless signing: a Statement signed as the CI job's OIDC identity, through
sigstore-python's :class:`~sigstore.sign.SigningContext` (a Fulcio certificate for a fresh key,
the signature logged in Rekor, a bundle back), with ``$SIGSTORE_ID_TOKEN`` or the job's ambient
token (:func:`sigstore.oidc.detect_credential`: GitHub Actions, GitLab, Buildkite, CircleCI,
Google Cloud). Verifying is :mod:`neuronbuild.attest.keyless`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuronbuild import envs
from neuronbuild.attest.files import read_small_file
from neuronbuild.attest.keyless import (
    MAX_TRUSTED_ROOT_BYTES,
    KeylessIdentity,
    certificate_identity,
    claimed_identity,
    first_line,
    keyless_name,
    require_sigstore,
)
from neuronbuild.digest import canonical_json
from neuronbuild.errors import StoreError, UserError

INSTANCES = {"": "production", "production": "production", "staging": "staging"}
"""``sigstore:`` (or ``sigstore:production``) names Sigstore's public-good instance,
``sigstore:staging`` its staging one; any other ``sigstore:PATH`` is a client trust config file
(a private Sigstore instance)."""


def identity_token(key_ref: str, option: str, environ: Mapping[str, str] | None) -> Any:
    """The OIDC identity token to sign with, read now: ``$SIGSTORE_ID_TOKEN``, else the CI
    job's ambient one (``detect_credential``), as a :class:`sigstore.oidc.IdentityToken`.

    Raises:
        UserError: no OIDC identity found, or a token that is no Sigstore identity token or is
            no longer valid (one line naming ``option``).
    """
    from sigstore.errors import Error
    from sigstore.oidc import IdentityToken, detect_credential

    token = envs.ID_TOKEN.get(environ)
    try:
        token = token or detect_credential()
    except Error as exc:
        raise UserError(f"{option} {key_ref!r}: no OIDC identity ({first_line(exc)})") from None
    if not token:
        raise UserError(
            f"{option} {key_ref!r}: no OIDC identity to sign as; run in CI with an OIDC token "
            f"(GitHub Actions: permissions: id-token: write), or set ${envs.SIGSTORE_ID_TOKEN}"
        )
    try:
        return IdentityToken(token)
    except Error as exc:
        raise UserError(f"{option} {key_ref!r}: {expired(token) or first_line(exc)}") from None


def expired(token: str) -> str | None:
    """Why an OIDC identity token sigstore refused is no longer valid, when its ``exp`` claim
    has passed (sigstore says only "Identity token is malformed or missing claims"): when it
    expired, how long ago, and how to get a fresh one; None when it has not expired or holds
    no readable ``exp``. The claims are read unverified: the signature is Fulcio's to check,
    and nothing is decided on them here but the words of a refusal."""
    import datetime

    import jwt

    from neuronbuild.human import duration

    try:
        claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False})
        at = float(claims["exp"])
    except (jwt.PyJWTError, KeyError, TypeError, ValueError):
        return None
    now = time.time()
    if at > now:
        return None
    when = datetime.datetime.fromtimestamp(at, datetime.timezone.utc).isoformat(timespec="seconds")
    return (
        f"the OIDC identity token expired at {when} ({duration(now - at)} ago); CI tokens last "
        "minutes: let the step that signs fetch its own (GitHub Actions: permissions: "
        f"id-token: write, with no ${envs.SIGSTORE_ID_TOKEN} set at the job's start), or set "
        f"${envs.SIGSTORE_ID_TOKEN} to a fresh one"
    )


class KeylessSigner:
    """Signs Statements as the CI job's OIDC identity through the Sigstore instance ``config``
    (a :class:`sigstore.models.ClientTrustConfig`): a Fulcio certificate for a fresh key, the
    signature logged in Rekor, a bundle back (sigstore-python's ``sign_dsse``). The token is
    read again for each signature (:func:`identity_token`): ``compile --sign`` signs hours
    after it starts, and CI tokens last minutes (an ambient one is fetched anew)."""

    def __init__(
        self, config: Any, key_ref: str, option: str, environ: Mapping[str, str] | None
    ) -> None:
        self.config, self.key_ref, self.option, self.environ = config, key_ref, option, environ

    def sign(self, statement: dict[str, Any]) -> tuple[str, bytes, str]:
        """``(name, bundle bytes, who)`` for ``statement``: the :func:`keyless_name` it is
        stored under, the bundle's JSON, and ``identity X (issuer Y)``.

        Raises:
            UserError: see :func:`identity_token`; the token expired while signing.
            StoreError: Fulcio or Rekor refused or could not be reached (exit 3).
        """
        from requests import RequestException
        from sigstore._internal.fulcio.client import ExpiredCertificate, FulcioClientError
        from sigstore._internal.rekor import RekorClientError
        from sigstore.dsse import Statement
        from sigstore.errors import Error
        from sigstore.oidc import ExpiredIdentity
        from sigstore.sign import SigningContext

        token = identity_token(self.key_ref, self.option, self.environ)
        failed = f"Sigstore ({self.key_ref}) did not sign"
        try:
            context = SigningContext.from_trust_config(self.config)
            # cache=True (the default) is needed: with cache=False, sigstore-python 4.5
            # certifies one fresh key and signs with another (its _private_key property makes
            # a new key on each use), so the bundle never verifies. The context ends here.
            with context.signer(token) as signer:
                bundle = signer.sign_dsse(Statement(canonical_json(statement)))
        except (ExpiredIdentity, ExpiredCertificate):
            raise UserError(
                f"{self.option} {self.key_ref!r}: the OIDC identity token expired before it "
                f"signed; sign again with a fresh one (${envs.SIGSTORE_ID_TOKEN} or the job's)"
            ) from None
        except FulcioClientError as exc:  # its HTTP error is its cause, its message often empty
            raise StoreError(f"{failed}: Fulcio: {first_line(exc, 160)}") from None
        except RekorClientError as exc:
            raise StoreError(f"{failed}: Rekor: {first_line(exc, 160)}") from None
        except (Error, RequestException, OSError, ValueError) as exc:
            raise StoreError(f"{failed}: {first_line(exc, 160)}") from None
        identity, issuer = claimed_identity(bundle)
        who = KeylessIdentity(*certificate_identity(bundle)).name()
        return keyless_name(identity, issuer), bundle.to_json().encode(), who


def keyless_signer(
    key_ref: str, option: str, environ: Mapping[str, str] | None = None
) -> KeylessSigner:
    """The signer of KEY_REF ``sigstore:[production|staging|PATH]`` (see :data:`INSTANCES`),
    checked now: an OIDC identity is there to sign as (:func:`identity_token`; read again
    when it signs) and the instance's trust config reads.

    Raises:
        UserError: sigstore-python missing, see :func:`identity_token`, or an unreadable trust
            config (one line naming ``option``).
        StoreError: the public-good or staging trust config could not be refreshed (TUF).
    """
    require_sigstore(f"{option} {key_ref!r}")
    from sigstore.models import ClientTrustConfig

    identity_token(key_ref, option, environ)  # refused now, not after hours of compiling
    where = key_ref.partition(":")[2]
    try:
        if where in INSTANCES:
            config = getattr(ClientTrustConfig, INSTANCES[where])()
        else:
            text = read_small_file(Path(where), MAX_TRUSTED_ROOT_BYTES, option, "a trust config")
            config = ClientTrustConfig.from_json(text.decode(errors="replace"))
    except UserError:
        raise
    except Exception as exc:  # TUFError, pydantic's ValidationError
        raise (StoreError if where in INSTANCES else UserError)(
            f"{option} {key_ref!r}: no Sigstore trust config ({first_line(exc)})"
        ) from None
    return KeylessSigner(config, key_ref, option, environ)
