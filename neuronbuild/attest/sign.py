"""Signing a sealed manifest: its Statement built, signed and stored beside it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from securesystemslib.signer import Signer

from neuronbuild.attest.builder import builder_from_env
from neuronbuild.attest.envelope import sign_statement
from neuronbuild.attest.statement import statement
from neuronbuild.store.cas import Store


@dataclass(frozen=True)
class Signed:
    """One attestation written: the ``manifest`` it is over, the ``keyid`` that signed it, the
    ``builder`` id it names and the ``url`` it was stored at."""

    manifest: str
    keyid: str
    builder: str
    url: str

    def to_json(self) -> dict[str, Any]:
        """``sign --json`` less its ``store`` (``neuronbuild/schemas/sign.json``)."""
        return {
            "manifest": self.manifest,
            "keyid": self.keyid,
            "builder": self.builder,
            "url": self.url,
        }

    def line(self) -> str:
        """The human result line."""
        return f"signed {self.manifest} with key {self.keyid[:16]} (builder {self.builder})"


def sign_manifest(store: Store, digest: str, signer: Signer, environ: Mapping[str, str]) -> Signed:
    """Attest manifest ``digest`` of ``store``: its Statement (builder read from ``environ``,
    the environment the command started with) in a DSSE envelope signed by ``signer``, stored as
    ``attestations/<manifest>/<keyid>.json``.

    Raises:
        UserError: no such manifest; StoreDataInvalid: it is malformed or hostile;
        StoreError: the store failed.
    """
    manifest = store.get_manifest(digest)
    builder = builder_from_env(environ)
    data = sign_statement(statement(manifest, digest, builder), signer)
    keyid = str(signer.public_key.keyid)
    store.put_attestation(digest, keyid, data)
    return Signed(digest, keyid, builder.id, store.url_of(store.layout.attestation(digest, keyid)))
