"""``neuronbuild image``: a manifest's node image, built, pushed, and named by digest."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from neuronbuild.human import count, size
from neuronbuild.ui.console import echo_json
from neuronbuild.ui.options import cache_option, dry_run_option, json_option

if TYPE_CHECKING:
    from neuronbuild.image.build import ImageBuilt, IndexImageBuilt
    from neuronbuild.transports.oci_registry import RegistryURL


@click.command()
@click.argument("target", metavar="REF|MANIFEST")
@cache_option
@click.option(
    "--to",
    "to",
    metavar="URL",
    required=True,
    help="The registry repository to push to: oci://HOST[:PORT]/REPOSITORY[:TAG], or "
    "oci+http://... for a plain-HTTP registry; without a tag the image is pushed by digest only.",
)
@click.option(
    "--tmp-dir",
    metavar="DIR",
    type=click.Path(file_okay=False, exists=True),
    help="Where the layer is written before its upload; it needs room for the manifest's bytes "
    "(default: $TMPDIR, else /tmp).",
)
@click.option(
    "--key",
    "key_ref",
    metavar="KEY_REF",
    help="Also sign the image itself: an in-toto Statement whose subject is the image digest "
    "(what admission controllers match), signed before the upload and pushed as its referrer. "
    "KEY_REF as for `neuronbuild sign`: file:PATH or PATH, awskms:ARN, sigstore:.",
)
@dry_run_option("check the manifest, its blobs in the store and that the registry answers")
@json_option()
def image(
    target: str,
    cache: str,
    to: str,
    tmp_dir: str | None,
    key_ref: str | None,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Build the node image of REF|MANIFEST (the folder `serve` lays out under VLLM_CACHE_ROOT,
    with a stamp `serve` checks on a read-only mount), push it, and print its reference by
    digest, HOST/REPOSITORY@sha256:... (the last line of stdout). The same manifest gives the same
    image digest on any machine. Mount it in a pod as an image volume and serve from it with
    `neuronbuild serve --manifest DIGEST --vllm-cache-root MOUNT`. For a ref on an index (builds
    per target, release or instruction set): one image per build, then an OCI image index of
    them under --to's tag, each with its platform (linux/amd64, linux/arm64), so a node's
    runtime pulls the image of its architecture.

    \b
    The manifest's attestations (`neuronbuild sign`) travel as referrers of the image; they name
    the neuronbuild manifest. With --key the image gets its own, naming the image digest.

    \b
    Examples:
      neuronbuild image app/prod --to oci://registry.example.com/ml/app-artifacts:prod
      neuronbuild image app/prod --to oci://registry.example.com/ml/app:prod --key sigstore:
      neuronbuild image sha256:3f2a9c1b --to oci+http://localhost:5000/app --dry-run
    """
    from neuronbuild import start_env
    from neuronbuild.attest.keys import load_signer
    from neuronbuild.image.build import build_image, build_index_image
    from neuronbuild.store.cas import Store
    from neuronbuild.transports.oci_registry import parse_registry_url
    from neuronbuild.ui.progress import ByteProgress

    dest = parse_registry_url(to, "--to")
    signer = load_signer(key_ref, "--key") if key_ref else None  # refused before the store is read
    store = Store(cache)
    found = store.resolve_target(target)
    options: dict[str, Any] = {
        "dry_run": dry_run,
        "scratch": Path(tmp_dir) if tmp_dir else None,
        "progress": ByteProgress,
        "signer": signer,
        "environ": start_env.environ(),
    }
    if store.is_index(found.digest):
        indexed = build_index_image(store, found.digest, dest, **options)
        if as_json:
            echo_json("image", {"store": store.url, "ref": found.ref_text, **indexed.to_json()})
            return
        for one in indexed.images:
            echo_image(one, one.manifest, dest)
        echo_image_index(indexed, found.digest, found.ref_text)
        return
    built = build_image(store, found.digest, dest, **options)
    if as_json:
        echo_json("image", {"store": store.url, "ref": found.ref_text, **built.to_json()})
        return
    what = f"{found.digest}{f' ({found.ref_text})' if found.ref_text else ''}"
    echo_image(built, what, dest)


def echo_image(built: ImageBuilt, what: str, dest: RegistryURL) -> None:
    """``image``'s lines for one build's node image (a dry run: what it would push)."""
    if built.reference is None:
        click.echo(
            f"would push the image of {what} to {dest.url}: {count(built.files, 'file')}, "
            f"{size(built.bytes)}, linux/{built.architecture}"
        )
        return
    click.echo(
        f"image of {what}: {count(built.files, 'file')}, {size(built.bytes)}, "
        f"linux/{built.architecture}; layer {built.layer} ({size(built.layer_bytes or 0)}); "
        f"{count(built.uploaded, 'blob')} uploaded"
        + (
            f", {count(built.attestations, 'attestation')} as referrers"
            if built.attestations
            else ""
        )
        + (f"; the image signed by {built.signed_by}" if built.signed_by else "")
    )
    click.echo(built.reference)


def echo_image_index(indexed: IndexImageBuilt, digest: str, ref: str | None) -> None:
    """``image``'s lines for the OCI image index of an index's node images."""
    what = f"index {digest}{f' ({ref})' if ref else ''}"
    platforms = ", ".join(f"linux/{i.architecture}" for i in indexed.images)
    if indexed.reference is None:
        click.echo(f"would push an image index of {what} to {indexed.destination.url}: {platforms}")
        return
    click.echo(f"image index of {what}: {count(len(indexed.images), 'image')} ({platforms})")
    click.echo(indexed.reference)
