"""A node image's attestations as OCI referrers: each signed statement of its neuronbuild
manifest (``attestations/``, :mod:`neuronbuild.attest`), and the image's own (its in-toto subject
the image digest, signed by ``neuronbuild image --key``), pushed as an artifact manifest whose
``subject`` is the image manifest (OCI distribution spec 1.1, "Listing Referrers").

Each referrer is an image manifest with ``artifactType`` :data:`DSSE_MEDIA_TYPE` (a keyless
attestation's: its Sigstore bundle's own ``mediaType``, as cosign lists bundles), the empty
config (image-spec ``manifest.md``, "Guidance for an Empty Descriptor") and one layer, the
envelope's bytes as the store holds them (untrusted: a reader verifies them, as ``verify`` does).
A registry that indexes referrers itself says so with ``OCI-Subject``; on one that does not
(distribution 2.8, Debian's docker-registry) the spec's fallback is kept: an image index tagged
``sha256-<image hex>`` listing them, read, extended, written back and read again, as refs are
moved on a registry (:mod:`neuronbuild.store.oci`): a push whose entries another writer's
index dropped writes them again. That tag has no compare-and-swap, so the one case left is a
racer that read the index before a push and writes it more than 0.25 s after that push's
check: it drops the entries (the referrer manifests themselves stay; pushing again restores
them).
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path

from neuronbuild.digest import canonical_json, hex_of, sha256_digest
from neuronbuild.errors import StoreError
from neuronbuild.transports.oci_registry import INDEX_TYPE, Registry

DSSE_MEDIA_TYPE = "application/vnd.dsse.envelope.v1+json"
"""The DSSE envelope's media type, as its spec and in-toto's OCI usage name it."""
EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
INDEX_MEDIA_TYPE = INDEX_TYPE
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
KEYID_ANNOTATION = "dev.neuronbuild.keyid"
SETTLE_SECONDS = 0.25
INDEX_ROUNDS = 8
"""The fallback referrers index is written back at most :data:`INDEX_ROUNDS` times per push,
each write checked after :data:`SETTLE_SECONDS` (to twice that: jittered)."""


def artifact_type(attestation: bytes) -> str:
    """The media type of a stored attestation: a Sigstore bundle's own ``mediaType`` (keyless,
    :mod:`neuronbuild.attest.keyless`), else :data:`DSSE_MEDIA_TYPE`. The bytes are untrusted:
    anything that is not a bundle is called an envelope; readers verify either way."""
    from neuronbuild.attest.keyless import BUNDLE_MEDIA_TYPES

    try:
        value = json.loads(attestation)
    except (ValueError, RecursionError):  # untrusted bytes: nested past Python's stack too
        return DSSE_MEDIA_TYPE
    found = value.get("mediaType") if isinstance(value, dict) else None
    return found if found in BUNDLE_MEDIA_TYPES else DSSE_MEDIA_TYPE


SUBJECT_ANNOTATION = "dev.neuronbuild.subject"
"""What the attestation's in-toto subject is: ``image`` (the image itself, signed by ``neuronbuild
image --key``: what cosign and policy-controller verify) or ``manifest`` (the build's, which
names the neuronbuild manifest the image lays out)."""


def referrer(
    image: str, image_size: int, keyid: str, envelope: bytes, manifest: str, subject: str
) -> bytes:
    """The canonical bytes of the referrer manifest of one attestation of ``image``, whose
    in-toto ``subject`` is the ``image`` or the ``manifest`` (:data:`SUBJECT_ANNOTATION`)."""
    kind = artifact_type(envelope)
    return canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "artifactType": kind,
            "config": {
                "mediaType": EMPTY_MEDIA_TYPE,
                "digest": sha256_digest(EMPTY),
                "size": len(EMPTY),
            },
            "layers": [
                {
                    "mediaType": kind,
                    "digest": sha256_digest(envelope),
                    "size": len(envelope),
                }
            ],
            "subject": {"mediaType": MANIFEST_MEDIA_TYPE, "digest": image, "size": image_size},
            "annotations": {
                KEYID_ANNOTATION: keyid,
                "dev.neuronbuild.manifest": manifest,
                SUBJECT_ANNOTATION: subject,
            },
        }
    )


def _listed(client: Registry, tag: str) -> list[dict[str, object]]:
    """The descriptors the fallback referrers index ``tag`` lists ([] when absent).

    Raises:
        StoreError: ``tag`` holds no image index.
    """
    got = client.get_manifest(tag, INDEX_MEDIA_TYPE)
    if got is None:
        return []
    try:
        listed = json.loads(got[0]).get("manifests", [])
        if not isinstance(listed, list):
            raise ValueError("manifests is not a list")
        return [m for m in listed if isinstance(m, dict)]
    except (ValueError, AttributeError, RecursionError):
        raise StoreError(
            f"{client.where.url}: the referrers index {tag} is not an image index"
        ) from None


def _indexed(client: Registry, image: str, added: list[dict[str, object]]) -> None:
    """Add ``added`` (descriptors) to the fallback referrers index of ``image``: read it, write
    it back with those it lacks, and read it again after 0.25-0.5 s (:data:`SETTLE_SECONDS`,
    jittered so that racers part), writing again while another writer's index dropped ours.

    Raises:
        StoreError: other writers dropped ours :data:`INDEX_ROUNDS` times running.
    """
    tag = f"sha256-{hex_of(image)}"
    for turn in range(INDEX_ROUNDS + 1):
        listed = _listed(client, tag)
        known = {m.get("digest") for m in listed}
        missing = [d for d in added if d["digest"] not in known]
        if not missing:
            return
        if turn == INDEX_ROUNDS:
            break
        index = {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": sorted(listed + missing, key=lambda m: str(m.get("digest"))),
        }
        client.put_manifest(tag, canonical_json(index), INDEX_MEDIA_TYPE)
        time.sleep(SETTLE_SECONDS * (1 + random.random()))
    raise StoreError(
        f"{client.where.url}: other writers rewrote the referrers index {tag} "
        f"{INDEX_ROUNDS} times while attestations were added to it; push them again"
    )


def push_attestations(
    client: Registry,
    image: str,
    image_size: int,
    manifest: str,
    attestations: list[tuple[str, bytes, str]],
    scratch: Path | None = None,
) -> int:
    """Push each of ``attestations`` ((keyid, envelope bytes, subject: ``image`` or
    ``manifest``), :data:`SUBJECT_ANNOTATION`) of the node image of neuronbuild manifest
    ``manifest`` as a referrer of ``image`` (its manifest being ``image_size`` bytes), and index
    them where the registry does not. Returns how many were pushed.

    Raises:
        StoreError: the registry refused or failed (after retries).
    """
    if not attestations:
        return 0
    added: list[dict[str, object]] = []
    indexes_itself = True
    with tempfile.TemporaryDirectory(prefix="neuronbuild-referrers-", dir=scratch) as work:
        empty = Path(work) / "empty.json"
        empty.write_bytes(EMPTY)
        client.push_file(str(empty), sha256_digest(EMPTY), len(EMPTY))
        for keyid, envelope, about in sorted(attestations):
            path = Path(work) / "envelope.json"
            path.write_bytes(envelope)
            client.push_file(str(path), sha256_digest(envelope), len(envelope))
            data = referrer(image, image_size, keyid, envelope, manifest, about)
            digest = sha256_digest(data)
            _, subject = client.put_manifest(digest, data, MANIFEST_MEDIA_TYPE)
            indexes_itself = indexes_itself and subject
            added.append(
                {
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "digest": digest,
                    "size": len(data),
                    "artifactType": artifact_type(envelope),
                    "annotations": {KEYID_ANNOTATION: keyid, SUBJECT_ANNOTATION: about},
                }
            )
    if not indexes_itself:
        _indexed(client, image, added)
    return len(added)
