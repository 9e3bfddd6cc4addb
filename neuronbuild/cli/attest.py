"""The attestation command: ``sign`` (an attestation of an existing manifest)."""

from __future__ import annotations

import click

from neuronbuild.ui.console import echo_json
from neuronbuild.ui.options import cache_option, json_option


@click.command()
@click.argument("target", metavar="REF|MANIFEST")
@click.option(
    "--key",
    "key_ref",
    metavar="KEY_REF",
    required=True,
    help=(
        "The signing key: file:PATH or PATH of a PEM private key (Ed25519 or ECDSA P-256), "
        "awskms:ARN of an AWS KMS key (ECC_NIST_P256; needs neuronbuild[kms]), or sigstore: "
        "to sign keyless as the CI job's OIDC identity (needs neuronbuild[sigstore]; "
        "sigstore:staging, or sigstore:PATH of a private instance's client trust config)."
    ),
)
@cache_option
@json_option()
def sign(target: str, key_ref: str, cache: str, as_json: bool) -> None:
    """Sign REF|MANIFEST: write an in-toto Statement (SLSA v1 provenance: recipe, toolchain,
    unit keys, the CI builder and run) in a DSSE envelope signed by --key, as
    attestations/<manifest>/<keyid>.json beside the manifest (keyless: a Sigstore bundle, named
    for the identity). Nodes whose trust policy names the key or identity then serve it
    (serve --policy).

    \b
    Examples:
      neuronbuild sign app/latest --key ci.key --cache s3://bucket/store
      neuronbuild sign app/latest --key awskms:arn:aws:kms:us-east-1:111122223333:key/ID
      neuronbuild sign app/latest --key sigstore:      # in CI, with an OIDC token
    """
    from neuronbuild import start_env
    from neuronbuild.attest.keys import load_signer
    from neuronbuild.attest.sign import sign_manifest
    from neuronbuild.store.cas import Store

    signer = load_signer(key_ref, "--key")  # a bad key is refused before the store is read
    store = Store(cache)
    signed = sign_manifest(store, store.resolve(target), signer, start_env.environ())
    if as_json:
        echo_json("sign", {"store": store.url, **signed.to_json()})
    else:
        click.echo(signed.line())
