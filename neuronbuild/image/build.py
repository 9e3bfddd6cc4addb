"""``neuronbuild image``: build a manifest's node image (its lay-out as one OCI layer), push it to
a registry, and name it by digest; for an index (:mod:`neuronbuild.store.index`), one image per
build and an OCI image index of them under one tag, each with its platform.

The image is an OCI image manifest (image-spec ``manifest.md``) with one uncompressed layer
(:mod:`.layer`) and an OCI image config (``config.md``: ``os``, ``architecture``,
``rootfs.diff_ids``) so that containerd and CRI-O can unpack it, and Kubernetes mount it as an
image volume. Nothing in it depends on the host or the time: the same manifest gives the same
image digest on any machine.
Push order: the layer, the config, then the manifest (a registry refuses a manifest whose blobs it
lacks), by tag when ``--to`` names one, else by digest alone; then the manifest's attestations, as
referrers of the image (:mod:`.referrers`), which leave its digest as it is.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from securesystemslib.signer import Signer

from neuronbuild.attest.builder import builder_from_env
from neuronbuild.attest.keyless_sign import KeylessSigner
from neuronbuild.attest.sign import sign_told
from neuronbuild.attest.statement import image_statement
from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.engines.registry import ENGINES, get_engine
from neuronbuild.errors import NoRoom, StoreDataInvalid, StoreError, UserError
from neuronbuild.human import count
from neuronbuild.image.layer import LAYER_MEDIA_TYPE, write_layer
from neuronbuild.image.referrers import push_attestations
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, Manifest
from neuronbuild.transports.oci_registry import Registry, RegistryURL

MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_ANNOTATION = "dev.neuronbuild.manifest"
"""The image manifest's and config label's key for the neuronbuild manifest it lays out."""


class Progress(Protocol):
    """What ``build_image`` tells of the bytes it reads from the store (a progress bar)."""

    def advance(self, n_bytes: int) -> None: ...
    def close(self) -> None: ...


ProgressFactory = Callable[[str, int, int], Progress]
"""``(what, total bytes, blobs) -> progress``, as :class:`~neuronbuild.ui.progress.ByteProgress`."""


@dataclass(frozen=True)
class ImageBuilt:
    """A node image: the neuronbuild ``manifest`` it lays out, where it went (``destination``),
    its ``image`` manifest digest and ``reference`` by digest (None on a dry run), its layer's
    digest and size, and the ``files`` and file ``bytes`` it holds; ``uploaded``: blobs the
    registry lacked; ``attestations``: those pushed as referrers of the image
    (:mod:`.referrers`); ``signed_by``: who signed the image's own attestation (``--key``)."""

    manifest: str
    destination: RegistryURL
    architecture: str
    files: int
    bytes: int
    image: str | None = None
    layer: str | None = None
    layer_bytes: int | None = None
    uploaded: int = 0
    attestations: int = 0
    signed_by: str | None = None
    image_bytes: int | None = None
    """The size of the image manifest (bytes), as an image index's descriptor of it needs."""

    @property
    def reference(self) -> str | None:
        return self.destination.by_digest(self.image) if self.image else None

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest": self.manifest,
            "to": self.destination.url,
            "tag": self.destination.tag,
            "architecture": self.architecture,
            "n_files": self.files,
            "bytes": self.bytes,
            "image": self.image,
            "reference": self.reference,
            "layer": self.layer,
            "layer_bytes": self.layer_bytes,
            "uploaded": self.uploaded,
            "attestations": self.attestations,
            "signed_by": self.signed_by,
        }


def architecture(manifest: Manifest) -> str:
    """The OCI architecture the manifest's artifacts run on, as the engine of its first unit
    reads it from the unit's factors (``Engine.image_architecture``: a CPU build's from its
    ``cpu_isa``, ``x86_64-v3`` -> ``amd64``; a Neuron build's, ``amd64``); ``amd64`` for a
    manifest with no unit.

    Raises:
        StoreDataInvalid: a unit names no engine neuronbuild has, or factors its engine cannot
            place on a machine.
    """
    for unit in manifest.units[:1]:
        name = unit.factors.get("engine")
        if name not in ENGINES:
            raise StoreDataInvalid(f"manifest unit {unit.key}: unknown engine {str(name)[:60]!a}")
        try:
            return get_engine(str(name)).image_architecture(unit.factors)
        except ValueError as exc:
            raise StoreDataInvalid(f"manifest unit {unit.key}: {exc}") from None
    return "amd64"


def image_config(manifest_digest: str, layer_digest: str, arch: str) -> bytes:
    """The canonical bytes of the OCI image config: no command, no time, one layer."""
    return canonical_json(
        {
            "architecture": arch,
            "os": "linux",
            "config": {"Labels": {MANIFEST_ANNOTATION: manifest_digest}},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
    )


def image_manifest(
    manifest_digest: str, config: bytes, layer_digest: str, layer_size: int
) -> bytes:
    """The canonical bytes of the OCI image manifest of one config and one layer."""
    return canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {
                "mediaType": CONFIG_MEDIA_TYPE,
                "digest": sha256_digest(config),
                "size": len(config),
            },
            "layers": [{"mediaType": LAYER_MEDIA_TYPE, "digest": layer_digest, "size": layer_size}],
            "annotations": {MANIFEST_ANNOTATION: manifest_digest},
        }
    )


def build_image(
    store: Store,
    digest: str,
    dest: RegistryURL,
    *,
    dry_run: bool = False,
    scratch: Path | None = None,
    progress: ProgressFactory | None = None,
    signer: Signer | KeylessSigner | None = None,
    environ: Mapping[str, str] | None = None,
) -> ImageBuilt:
    """Build the node image of manifest ``digest`` from ``store`` and push it to ``dest``.

    The layer is written to a temporary file under ``scratch`` (default: the system's
    temporary folder), which needs room for the manifest's bytes, then streamed to the registry.
    ``dry_run``: check the manifest, that the store holds every blob and that the
    registry answers; build and push nothing. ``signer``: also sign the image itself, an in-toto
    Statement whose subject is the image digest (:func:`~neuronbuild.attest.statement.
    image_statement`, builder read from ``environ``), signed before any upload and pushed as its
    referrer beside the build's attestations, for admission controllers that match an
    attestation's subject to the image digest.

    Raises:
        UserError: no such manifest. StoreDataInvalid: the store lacks a blob or holds a corrupt
            one, or the manifest is hostile (exit code 2). StoreError: the store or the registry
            failed or refused, or (keyless) Sigstore did not sign (exit code 3). NoRoom:
            ``scratch`` is full (exit code 3). UserError: (keyless) no OIDC identity token, or
            it expired while signing (exit code 2).
    """
    manifest = store.get_manifest(digest)
    files = manifest.files()
    total = sum(f.size for f in files)
    arch = architecture(manifest)
    missing = store.missing_blobs(manifest.blobs())
    if missing:
        raise StoreDataInvalid(
            f"manifest {digest} is incomplete in {store.url}: {count(len(missing), 'blob')} "
            f"missing, e.g. {missing[0].path}; publish it again before building its image"
        )
    client = Registry(dest)
    client.ping(at_once=False, ok=(200, 401))
    built = ImageBuilt(digest, dest, arch, len(files), total)
    if dry_run:
        return built
    bar = progress("image", total, len(manifest.blobs())) if progress else None

    def fetch(file: FileRecord, local: Path) -> None:
        store.fetch_blob(file, local, bar.advance if bar else None)

    try:
        with tempfile.TemporaryDirectory(prefix="neuronbuild-image-", dir=scratch) as work:
            folder = Path(work)
            layer_path = folder / "layer.tar"
            try:
                with layer_path.open("wb") as out:
                    layer = write_layer(manifest, digest, fetch, out, folder)
            except OSError as exc:
                raise NoRoom.of(exc, folder, "cannot write the layer") or StoreError(
                    f"cannot write the layer under {folder}: {exc}"
                ) from None
            if bar:
                bar.close()
                bar = None
            config = image_config(digest, layer.digest, arch)
            (folder / "config.json").write_bytes(config)
            data = image_manifest(digest, config, layer.digest, layer.size)
            image = sha256_digest(data)
            attestations = [(k, v, "manifest") for k, v in store.get_attestations(digest).items()]
            signed_by = None
            if signer is not None:  # before the upload: a signer that fails costs no upload
                name = dest.by_digest(image).partition("@")[0]
                told = image_statement(
                    manifest, digest, image, name, builder_from_env(environ or {})
                )
                keyid, envelope, signed_by = sign_told(told, signer)
                attestations.append((keyid, envelope, "image"))
            uploaded = int(client.push_file(str(layer_path), layer.digest, layer.size))
            config_path = str(folder / "config.json")
            uploaded += client.push_file(config_path, sha256_digest(config), len(config))
    finally:
        if bar:
            bar.close()
    named, _ = client.put_manifest(dest.tag or image, data, MANIFEST_MEDIA_TYPE)
    if named and named != image:
        raise StoreError(
            f"{dest.url}: the registry names the image {named}, its bytes hash to {image}"
        )
    attested = push_attestations(client, image, len(data), digest, attestations, scratch)
    return ImageBuilt(
        digest,
        dest,
        arch,
        len(files),
        total,
        image,
        layer.digest,
        layer.size,
        uploaded,
        attested,
        signed_by,
        len(data),
    )


INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
INDEX_ANNOTATION = "dev.neuronbuild.index"
"""The image index's key for the neuronbuild index whose builds it lists."""
LABELS_ANNOTATION = "dev.neuronbuild.labels"
"""Each entry's key for its build's labels (canonical JSON): what a node must have to serve it."""


@dataclass(frozen=True)
class IndexImageBuilt:
    """The node images of an index's builds (``images``, one :class:`ImageBuilt` each) and the
    OCI image index listing them (``image``, its digest; None on a dry run) pushed under
    ``destination``'s tag."""

    index: str
    destination: RegistryURL
    images: tuple[ImageBuilt, ...]
    image: str | None = None

    @property
    def reference(self) -> str | None:
        return self.destination.by_digest(self.image) if self.image else None

    def to_json(self) -> dict[str, Any]:
        """``image --json`` of an index: the image index's digest and reference, the builds'
        files, bytes, uploads and attestations together, and ``images``: each build's image."""
        return {
            "manifest": self.index,
            "to": self.destination.url,
            "tag": self.destination.tag,
            "architecture": ",".join(sorted({i.architecture for i in self.images})),
            "n_files": sum(i.files for i in self.images),
            "bytes": sum(i.bytes for i in self.images),
            "image": self.image,
            "reference": self.reference,
            "layer": None,
            "layer_bytes": None,
            "uploaded": sum(i.uploaded for i in self.images),
            "attestations": sum(i.attestations for i in self.images),
            "signed_by": next((i.signed_by for i in self.images if i.signed_by), None),
            "images": [i.to_json() for i in self.images],
        }


def image_index(index: str, entries: list[tuple[ImageBuilt, dict[str, Any]]]) -> bytes:
    """The canonical bytes of the OCI image index (image-spec ``image-index.md``) of an index's
    node images, each with its ``platform`` (``linux``, its architecture) so that a runtime picks
    the image of its own architecture, and annotated with its build and that build's labels."""
    return canonical_json(
        {
            "schemaVersion": 2,
            "mediaType": INDEX_MEDIA_TYPE,
            "manifests": [
                {
                    "mediaType": MANIFEST_MEDIA_TYPE,
                    "digest": built.image,
                    "size": built.image_bytes,
                    "platform": {"os": "linux", "architecture": built.architecture},
                    "annotations": {
                        MANIFEST_ANNOTATION: built.manifest,
                        LABELS_ANNOTATION: canonical_json(labels).decode(),
                    },
                }
                for built, labels in entries
            ],
            "annotations": {INDEX_ANNOTATION: index},
        }
    )


def build_index_image(
    store: Store, digest: str, dest: RegistryURL, **options: Any
) -> IndexImageBuilt:
    """The node image of every build of index ``digest`` (:func:`build_image`, each pushed by
    digest alone, with ``options``), then one OCI image index of them pushed under ``dest``'s
    tag (else by its digest). Builds for different machines get different ``platform``s, so
    containerd pulls the one of its node's architecture.

    Raises:
        UserError: two builds run on one machine (two Neuron releases, two x86-64 levels): an
            image index cannot tell them apart, so nothing is built; as :func:`build_image`.
        StoreError: the registry names the image index by another digest than its bytes'.
    """
    entries = sorted(store.get_index(digest).entries, key=lambda e: e.manifest)
    seen: dict[str, str] = {}
    for entry in entries:
        arch = architecture(store.get_manifest(entry.manifest))
        if arch in seen:
            raise UserError(
                f"index {digest}: builds {seen[arch]} and {entry.manifest} both run on "
                f"linux/{arch} (two releases or instruction sets of one machine), which an image "
                "index cannot tell apart (a runtime pulls the first); build each one's image "
                f"under its own tag: neuronbuild image {entry.manifest} --to {dest.url}-..."
            )
        seen[arch] = entry.manifest
    by_digest = dataclasses.replace(dest, tag=None)
    built = [(build_image(store, e.manifest, by_digest, **options), e.labels) for e in entries]
    images = tuple(b for b, _ in built)
    if options.get("dry_run"):
        return IndexImageBuilt(digest, dest, images)
    data = image_index(digest, built)
    image = sha256_digest(data)
    named, _ = Registry(dest).put_manifest(dest.tag or image, data, INDEX_MEDIA_TYPE)
    if named and named != image:
        raise StoreError(
            f"{dest.url}: the registry names the image index {named}, its bytes hash to {image}"
        )
    return IndexImageBuilt(digest, dest, images, image)
