"""Signing a sealed manifest: its Statement built, signed and stored beside it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from securesystemslib.signer import Signer

from neuronbuild.attest.builder import builder_from_env
from neuronbuild.attest.envelope import sign_statement
from neuronbuild.attest.keyless_sign import KeylessSigner
from neuronbuild.attest.statement import statement
from neuronbuild.store.cas import Store


@dataclass(frozen=True)
class Signed:
    """One attestation written: the ``manifest`` it is over, the ``keyid`` that signed it (for
    a keyless one, the name it is stored under), the ``builder`` id it names, the ``url`` it was
    stored at, and ``who`` signed (``key <16 hex>``, ``identity ID (issuer URL)``)."""

    manifest: str
    keyid: str
    builder: str
    url: str
    who: str = ""

    def to_json(self) -> dict[str, Any]:
        """``sign --json`` less its ``store`` (``neuronbuild/schemas/sign.json``)."""
        return {
            "manifest": self.manifest,
            "keyid": self.keyid,
            "signer": self.who or f"key {self.keyid[:16]}",
            "builder": self.builder,
            "url": self.url,
        }

    def line(self) -> str:
        """The human result line."""
        who = self.who or f"key {self.keyid[:16]}"
        return f"signed {self.manifest} with {who} (builder {self.builder})"


def sign_told(told: dict[str, Any], signer: Signer | KeylessSigner) -> tuple[str, bytes, str]:
    """Sign the in-toto Statement ``told``: (the keyid it is stored under, the bytes stored, who
    signed). A key's signature is a DSSE envelope; a keyless one's a Sigstore bundle, named by
    :func:`~neuronbuild.attest.keyless.keyless_name`.

    Raises:
        StoreError: (keyless) Sigstore did not sign. UserError: (keyless) no OIDC identity
            token, or it expired while signing.
    """
    if isinstance(signer, KeylessSigner):
        return signer.sign(told)
    keyid = str(signer.public_key.keyid)
    return keyid, sign_statement(told, signer), f"key {keyid[:16]}"


def sign_manifest(
    store: Store, digest: str, signer: Signer | KeylessSigner, environ: Mapping[str, str]
) -> Signed:
    """Attest manifest ``digest`` of ``store``: its Statement (builder read from ``environ``,
    the environment the command started with) in a DSSE envelope signed by ``signer``, stored as
    ``attestations/<manifest>/<keyid>.json``; a keyless signer's in a Sigstore bundle, stored
    under :func:`~neuronbuild.attest.keyless.keyless_name`.

    Raises:
        UserError: no such manifest; StoreDataInvalid: it is malformed or hostile;
        StoreError: the store failed, or (keyless) Sigstore did not sign.
    """
    manifest = store.get_manifest(digest)
    builder = builder_from_env(environ)
    keyid, data, who = sign_told(statement(manifest, digest, builder), signer)
    store.put_attestation(digest, keyid, data)
    url = store.url_of(store.layout.attestation(digest, keyid))
    return Signed(digest, keyid, builder.id, url, who)
