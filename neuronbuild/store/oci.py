"""A store in an OCI registry repository (``oci://HOST[:PORT]/REPOSITORY``, plain HTTP with
``oci+http://``): the layout's paths mapped onto the distribution API, and what of the store's
guarantees holds there.

Mapping (:class:`RegistryBackend`):

- ``blobs/sha256/<2>/<hex>`` is the OCI blob ``sha256:<hex>`` (both are sha256-addressed: one
  digest). The registry checks an upload's bytes against its digest; a read is verified again by
  :class:`~neuronbuild.store.cas.Store` as on every store.
- every other object is a tag of an OCI image manifest whose ``artifactType`` and config media
  type are ``application/vnd.neuronbuild.<kind>.v1+json``, whose config blob holds the object's
  bytes (inline too, in the descriptor's ``data``, when small) and whose annotations hold its path
  (``dev.neuronbuild.path``) and the writer's time (``org.opencontainers.image.created``). A unit
  record's and a neuronbuild manifest's OCI manifest lists their blobs as its layers, so the
  registry's garbage collector keeps them while the record or manifest is tagged.
- tags: ``unit-<hex>``, ``manifest-<hex>``, ``index-<hex>``, ``layout-<hex>`` and
  ``lease-<hex>`` for the kinds named by a digest; ``<kind>-<16 hex>-<32 hex>`` (the sha256
  of the parent folder's and of the object's path) for refs, history, attestations, timings
  and tmp, whose paths are longer than a tag may be (``[A-Za-z0-9_][A-Za-z0-9._-]{0,127}``).
  A listing reads the tag list (paginated) and, for those hashed tags, each manifest's path
  annotation. Tags of other shapes are not ours and are left alone; a tag of our shape whose
  manifest is not ours (another type, another path, malformed or oversized) is hostile data
  (exit code 2).

Guarantees. The distribution API has no conditional write: a tag ``PUT`` replaces whatever the
tag named. So on a registry:

- blobs, unit records and manifests are named by their content; rewriting one with the same bytes
  changes nothing. Create-if-absent (the first unit record wins) is check, write, read back: a
  writer that reads back another's manifest under the tag reports it lost and adopts that record.
  Two builders racing within one round trip may both keep their own record; each manifest embeds
  the records it was sealed with, so no manifest is wrong, only the record later builders adopt.
- a ref move is compare-and-swap by check, write and read-after-write: the tag's manifest digest
  (unique per write: it carries the writer's time) is compared before the write, and read back
  after it; :meth:`~neuronbuild.store.cas.Store.move_ref` then waits
  :data:`RegistryBackend.settle_seconds` and walks the ref's history chain: a move another writer
  overwrote (both read the same ref) is reported as a conflict (exit code 3, or retried by
  ``set_ref``), never as a move that landed. What is not guaranteed: a racer whose read-to-write
  window outlasts the settle time can overwrite a move its mover already reported; the overwritten
  move is then off the history chain (``ls --history`` shows the chain; ``verify`` the rest).
- history entries have unique names and are never rewritten; leases are advice, as on every store.
- times (history order, gc's grace period, leases) are the writers' clocks.
- deleting a tag deletes its manifest by digest (the registry deletes the tags naming that
  digest, which are this object's alone), so a delete of a version another writer replaced
  deletes nothing of theirs.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import hashlib
import json
import re
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any, cast

from fsspec import AbstractFileSystem

from neuronbuild.digest import hash_file, hex_of, sha256_digest
from neuronbuild.errors import StoreDataInvalid, StoreError, Unsupported, UserError
from neuronbuild.human import count
from neuronbuild.store.layout import MAX_RECORD_BYTES, Layout
from neuronbuild.store.records import Manifest, UnitRecord
from neuronbuild.transports.backends import Backend, OnBytes, PlacesAt, SwapConflict
from neuronbuild.transports.oci_registry import (
    MAX_MANIFEST_BYTES,
    BlobRefused,
    FileBodies,
    Registry,
    RegistryURL,
    body_deadline,
    bytes_body,
    parse_registry_url,
    read_before,
)

PATH_ANNOTATION = "dev.neuronbuild.path"
CREATED_ANNOTATION = "org.opencontainers.image.created"
BLOB_TYPE = "application/vnd.neuronbuild.blob.v1"
"""The media type of a unit record's or manifest's layers: its files' bytes, as stored."""

INLINE_BYTES = 16 << 10
"""Objects up to this size are also inlined in their config descriptor (``data``), read in one
request."""

DIGEST_NAMED = {
    "units": "unit",
    "manifests": "manifest",
    "indexes": "index",
    "layouts": "layout",
    "leases": "lease",
    "probes": "probe",
}
"""Kinds whose objects are named ``<kind>/<hex>.json``: their tag is ``<prefix>-<hex>``."""

HASHED = {
    "refs": ("ref", 3),
    "history": ("history", 4),
    "attestations": ("attestation", 3),
    "additions": ("addition", 3),
    "receipts": ("receipt", 3),
    "timings": ("timing", 3),
    "tmp": ("tmp", 0),
}
"""Kinds whose tag is hashed: tag prefix and the depth of their objects' paths (0: any)."""

OUR_TAG = re.compile(
    r"^(unit|manifest|index|layout|lease|probe)-([0-9a-f]{64})$"
    r"|^(ref|history|attestation|addition|receipt|timing|tmp)-([0-9a-f]{16})-([0-9a-f]{32})$"
)


def artifact_type(kind: str) -> str:
    """The ``artifactType`` of the OCI manifest holding an object of layout kind ``kind``."""
    return f"application/vnd.neuronbuild.{kind}.v1+json"


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class RegistryNames(AbstractFileSystem):  # type: ignore[misc]  # fsspec ships no types
    """Spells a store path as its URL in messages (``oci://HOST/REPO/refs/app/latest``): the
    one file-system method the store asks of a registry backend."""

    protocol = ("oci", "oci+http")

    def __init__(self, scheme: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scheme = scheme

    def unstrip_protocol(self, name: str) -> str:
        return f"{self.scheme}://{name}"


class RegistryBackend(Backend):
    """The store's primitives on one registry repository (see the module's docstring for what
    they guarantee there).

    Raises:
        StoreError: the registry failed or refused (exit code 3).
        StoreDataInvalid: an object of ours that is malformed, oversized or not ours (exit 2).
    """

    rereads_mismatch = True
    lists_blobs = False
    settle_seconds = 1.0
    """How long a ref move waits before checking its move is on the ref's history chain
    (seconds): longer than a racer's read-to-write window over a WAN, or on a loaded CI host,
    where 0.25 s let a racing mover's overwrite go unseen; a ref moves once per build."""

    def __init__(self, url: str) -> None:
        where = parse_registry_url(url)
        root = f"{where.host}/{where.repository}"
        self.layout = Layout(root)  # the store's paths, which this backend maps onto tags
        super().__init__(RegistryNames(where.scheme), self.layout, url)
        self.where: RegistryURL = where
        self.registry = Registry(where)

    # Paths.

    def _rel(self, path: str) -> str:
        rel = path.removeprefix(self.root + "/")
        if rel == path:
            raise StoreDataInvalid(f"{self.url}: {path} is outside the store")
        return rel

    def _blob_digest(self, path: str) -> str | None:
        """The digest a ``blobs/`` path names, or None for another kind."""
        rel = self._rel(path)
        if not rel.startswith("blobs/"):
            return None
        digest = self.layout.digest_of("blobs", path)
        if digest is None or path != self.layout.blob(digest):
            raise StoreDataInvalid(f"{self.url_of(path)}: not a blob path")
        return digest

    def tag_of(self, path: str) -> str:
        """The tag an object's path is kept under (see the module's docstring)."""
        rel = self._rel(path)
        kind, _, rest = rel.partition("/")
        if kind in DIGEST_NAMED and re.fullmatch(r"[0-9a-f]{64}\.json", rest):
            return f"{DIGEST_NAMED[kind]}-{rest.removesuffix('.json')}"
        prefix = HASHED.get(kind, ("tmp", 0))[0] if kind in HASHED else None
        if prefix is None:
            raise StoreDataInvalid(f"{self.url_of(path)}: no kind of this store")
        parent = rel.rpartition("/")[0]
        return f"{prefix}-{_h(parent)[:16]}-{_h(rel)[:32]}"

    def url_of(self, path: str) -> str:
        return self.fs.unstrip_protocol(path)  # type: ignore[no-any-return]

    # The objects' OCI manifests.

    def _encode(self, path: str, data: bytes, config: str) -> bytes:
        """The OCI manifest of the object at ``path`` whose bytes are the blob ``config``."""
        rel = self._rel(path)
        kind = rel.partition("/")[0]
        descriptor: dict[str, Any] = {
            "mediaType": artifact_type(kind),
            "digest": config,
            "size": len(data),
        }
        if len(data) <= INLINE_BYTES:
            descriptor["data"] = base64.b64encode(data).decode()
        layers = [
            {"mediaType": BLOB_TYPE, "digest": d, "size": s}
            for d, s in sorted(_blobs_named(kind, data).items())
        ]
        created = datetime.datetime.fromtimestamp(time.time(), datetime.timezone.utc)
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": artifact_type(kind),
            "config": descriptor,
            "layers": layers,
            "annotations": {
                PATH_ANNOTATION: rel,
                CREATED_ANNOTATION: created.isoformat(timespec="microseconds"),
            },
        }
        return json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()

    def _decode(self, path: str, tag: str, raw: bytes) -> dict[str, Any]:
        """The OCI manifest under ``tag``, checked to be ours and to be ``path``'s.

        Raises:
            StoreDataInvalid: not JSON, not our artifact, or another object's (one line).
        """
        where = f"{self.url_of(path)} (tag {tag})"
        try:
            manifest = json.loads(raw)
        except (ValueError, RecursionError):
            raise StoreDataInvalid(f"{where}: its OCI manifest is not JSON") from None
        if not isinstance(manifest, dict):
            raise StoreDataInvalid(f"{where}: its OCI manifest is not a JSON object")
        kind = self._rel(path).partition("/")[0]
        annotations = manifest.get("annotations")
        config = manifest.get("config")
        if manifest.get("artifactType") != artifact_type(kind) or not isinstance(config, dict):
            raise StoreDataInvalid(
                f"{where}: not a neuronbuild {kind} object (artifactType "
                f"{ascii(manifest.get('artifactType'))[:80]}); another tool's tag in the way?"
            )
        if not isinstance(annotations, dict) or annotations.get(PATH_ANNOTATION) != self._rel(path):
            raise StoreDataInvalid(f"{where}: holds another object ({PATH_ANNOTATION} differs)")
        return manifest

    def _get(self, path: str) -> tuple[dict[str, Any], str] | None:
        """The object's OCI manifest (checked) and its digest, or None when absent."""
        tag = self.tag_of(path)
        got = self.registry.get_manifest(tag)
        if got is None:
            return None
        raw, digest = got
        return self._decode(path, tag, raw), digest

    def _config(self, path: str, manifest: dict[str, Any], limit: int) -> bytes:
        """The object's bytes: the config blob, inline or fetched, verified against its digest.

        Raises:
            StoreDataInvalid: over ``limit`` bytes, missing, or not matching its digest.
        """
        config = manifest["config"]
        where = self.url_of(path)
        size, digest = config.get("size"), config.get("digest")
        if not isinstance(size, int) or not isinstance(digest, str):
            raise StoreDataInvalid(f"{where}: its OCI manifest's config is malformed")
        if size > limit:
            raise self._too_big(path, limit)
        hex_of(digest)  # a digest, or StoreDataInvalid
        inline = config.get("data")
        if isinstance(inline, str):
            try:
                data = base64.b64decode(inline, validate=True)
            except ValueError:
                raise StoreDataInvalid(f"{where}: its inline data is not base64") from None
        else:
            got = self.registry.read_blob(digest, limit + 1)
            if got is None:
                raise StoreDataInvalid(f"{where}: its config blob {digest} is missing")
            data = got
        if len(data) > limit:
            raise self._too_big(path, limit)
        if sha256_digest(data) != digest or len(data) != size:
            raise StoreDataInvalid(f"{where}: its bytes do not match its config digest")
        return data

    # Reads.

    def check_root(self, create: bool) -> None:
        self.registry.ping()
        self.registry.tags()  # a repository nothing was pushed to yet reads as empty

    def exists(self, path: str) -> bool:
        if path == self.root:
            return True  # a repository exists once something is pushed; empty until then
        digest = self._blob_digest(path)
        if digest is not None:
            return self.registry.blob_size(digest) is not None
        return self.registry.manifest_digest(self.tag_of(path)) is not None

    def read_versioned(self, path: str, limit: int) -> tuple[bytes | None, Any]:
        digest = self._blob_digest(path)
        if digest is not None:
            data = self.registry.read_blob(digest, limit + 1)
            if data is None:
                return None, None
            if len(data) > limit:
                raise self._too_big(path, limit)
            return data, digest
        got = self._get(path)
        if got is None:
            return None, None
        manifest, version = got
        return self._config(path, manifest, limit), version

    def size(self, path: str) -> int | None:
        digest = self._blob_digest(path)
        if digest is not None:
            return self.registry.blob_size(digest)
        got = self._get(path)
        return None if got is None else int(got[0]["config"].get("size") or 0)

    def modified(self, path: str, fresh: bool = False) -> float | None:
        if self._blob_digest(path) is not None:
            return None  # the registry keeps no time of a blob
        got = self._get(path)
        return None if got is None else _created(got[0])

    def _tags_under(self, prefix: str) -> dict[str, str | None]:
        """Our tags whose objects may lie under ``prefix``: tag -> path where the tag spells it
        (the kinds named by a digest), else None (its manifest says)."""
        rel = self._rel(prefix.rstrip("/") + "/").rstrip("/")
        kind = rel.partition("/")[0]
        depth = rel.count("/") + 1
        found: dict[str, str | None] = {}
        for tag in self.registry.tags():
            match = OUR_TAG.match(tag)
            if match is None:
                continue  # not ours
            if match.group(1):
                named = {v: k for k, v in DIGEST_NAMED.items()}[match.group(1)]
                if named == kind:
                    found[tag] = f"{self.root}/{named}/{match.group(2)}.json"
                continue
            tag_kind, parent = match.group(3), match.group(4)
            if kind not in HASHED or HASHED[kind][0] != tag_kind:
                continue
            objects_at = HASHED[kind][1]
            if depth == objects_at - 1 and parent != _h(rel)[:16]:
                continue  # the folder that holds the objects: its hash is in the tag
            found[tag] = None
        return found

    def _listing(self, prefix: str) -> dict[str, dict[str, Any]]:
        """Every object under ``prefix`` with its ``size`` and ``mtime`` (one listing of tags,
        then each manifest read, 16 at a time)."""
        rel_prefix = self._rel(prefix.rstrip("/") + "/").rstrip("/") + "/"
        if rel_prefix.partition("/")[0] == "blobs":
            return self._blob_listing()
        tags = self._tags_under(prefix)

        def detail(item: tuple[str, str | None]) -> tuple[str, dict[str, Any]] | None:
            tag, path = item
            got = self.registry.get_manifest(tag)
            if got is None:
                return None  # deleted since the tag list
            manifest = _json_object(got[0]) or {}
            annotations = manifest.get("annotations")
            rel = annotations.get(PATH_ANNOTATION) if isinstance(annotations, dict) else None
            if not isinstance(rel, str):
                raise StoreDataInvalid(f"{self.url} (tag {tag}): not a neuronbuild object")
            full = f"{self.root}/{rel}"
            if (path is not None and full != path) or self.tag_of_safe(full) != tag:
                raise StoreDataInvalid(f"{self.url} (tag {tag}): holds another object ({rel!r})")
            if not rel.startswith(rel_prefix):
                return None
            self._decode(full, tag, got[0])
            return full, {"size": manifest["config"].get("size"), "mtime": _created(manifest)}

        with ThreadPoolExecutor(max_workers=16) as pool:
            return dict(d for d in pool.map(detail, tags.items()) if d is not None)

    def tag_of_safe(self, path: str) -> str | None:
        try:
            return self.tag_of(path)
        except StoreDataInvalid:
            return None

    def find(self, prefix: str) -> list[str]:
        rel = self._rel(prefix.rstrip("/") + "/")
        tags = self._tags_under(prefix) if rel.partition("/")[0] != "blobs" else {}
        if tags and all(path is not None for path in tags.values()):
            return sorted(str(path) for path in tags.values())  # spelled by the tags alone
        return sorted(self._listing(prefix))

    def _blob_listing(self) -> dict[str, dict[str, Any]]:
        """The blobs the repository holds for this store, as its unit records and manifests
        list them (the distribution API lists no blobs): path -> size."""
        found: dict[str, dict[str, Any]] = {}
        for kind in ("units", "manifests"):
            tags = self._tags_under(self.layout.folder(kind))

            def layers(tag: str) -> list[dict[str, Any]]:
                got = self.registry.get_manifest(tag)
                manifest = _json_object(got[0]) if got else None
                listed = manifest.get("layers") if manifest else None
                return listed if isinstance(listed, list) else []

            with ThreadPoolExecutor(max_workers=16) as pool:
                for listed in pool.map(layers, tags):
                    for layer in listed:
                        digest, size = layer.get("digest"), layer.get("size")
                        if isinstance(digest, str) and isinstance(size, int):
                            with contextlib.suppress(StoreDataInvalid):
                                found[self.layout.blob(digest)] = {"size": size, "mtime": None}
        return found

    def open_read(self, path: str, size: int | None = None) -> IO[bytes]:
        digest = self._blob_digest(path)
        if digest is None:
            data = self.read(path, MAX_RECORD_BYTES)
            if data is None:
                raise FileNotFoundError(path)
            import io

            return io.BytesIO(data)
        return cast(IO[bytes], BlobReader(self.registry, digest))

    # Writes.

    def _upload(self, digest: str, data: bytes) -> None:
        if self.registry.blob_size(digest) == len(data):
            return
        self.registry.upload_blob(digest, len(data), bytes_body(data))

    def _put_object(self, path: str, data: bytes) -> str:
        """Write the object; returns its OCI manifest's digest.

        Raises:
            UserError: its OCI manifest (a layer per blob it names) is over the registry's
                :data:`.MAX_MANIFEST_BYTES` (about 30,000 blobs); nothing is written.
        """
        config = sha256_digest(data)
        manifest = self._encode(path, data, config)
        if len(manifest) > MAX_MANIFEST_BYTES:
            layers = len(json.loads(manifest)["layers"])
            raise UserError(
                f"{self.url_of(path)}: its OCI manifest would be {len(manifest)} bytes "
                f"({count(layers, 'blob')} as layers), over the {MAX_MANIFEST_BYTES} a "
                "registry takes; "
                "nothing was written: cut the build (fewer buckets), split the recipe, or keep "
                "it in a folder or s3:// store"
            )
        self._upload(config, data)
        self.registry.put_manifest(self.tag_of(path), manifest)
        return sha256_digest(manifest)

    def put(self, path: str, data: bytes) -> None:
        digest = self._blob_digest(path)
        if digest is None:
            self._put_object(path, data)
            return
        try:
            self.registry.upload_blob(digest, len(data), bytes_body(data))
        except BlobRefused as exc:
            if sha256_digest(data) == digest:  # the bytes sent were right: the registry is not
                raise StoreError(f"{self.url_of(path)}: {exc}; the bytes sent hash to it") from None
            raise StoreDataInvalid(
                f"{self.url_of(path)}: the registry refused bytes that do not hash to {digest}"
            ) from None

    def create(self, path: str, data: bytes) -> bool:
        if self._blob_digest(path) is not None:
            if self.exists(path):
                return False
            self.put(path, data)
            return True
        tag = self.tag_of(path)
        if self.registry.manifest_digest(tag) is not None:
            return False
        mine = self._put_object(path, data)
        # Read after write: a racer that also found the tag absent and wrote after us holds it.
        return self.registry.manifest_digest(tag) == mine

    def put_file(self, local: str | Path, path: str, on_bytes: OnBytes | None = None) -> None:
        digest = self._blob_digest(path)
        if digest is None:
            self.put(path, Path(local).read_bytes())
            return
        size = Path(local).stat().st_size
        try:
            with FileBodies(str(local), on_bytes) as bodies:
                self.registry.upload_blob(digest, size, bodies.open)
        except BlobRefused as exc:
            sent_right = hash_file(local)[0] == digest
            why = "yet the file hashes to it" if sent_right else f"{local} changed as it was sent"
            raise StoreError(f"{self.url_of(path)}: {exc}: {why}") from None

    def swap(self, path: str, data: bytes, token: Any) -> None:
        tag = self.tag_of(path)
        if self.registry.manifest_digest(tag) != token:
            raise SwapConflict(f"{path} changed while moving it")
        mine = self._put_object(path, data)
        if self.registry.manifest_digest(tag) != mine:
            raise SwapConflict(f"{path}: another writer moved it at the same time")

    def delete(self, path: str) -> None:
        digest = self._blob_digest(path)
        with self._deletes(path):
            if digest is not None:
                self.registry.delete_blob(digest)
                return
            current = self.registry.manifest_digest(self.tag_of(path))
            if current is not None:
                self.registry.delete_manifest(current)

    def delete_if(self, path: str, token: Any) -> bool:
        # Deleting by digest removes the tag only while it still names that digest.
        current = self.registry.manifest_digest(self.tag_of(path))
        if current is None or current != token:
            return False
        with self._deletes(path):
            self.registry.delete_manifest(current)
        return True

    @contextlib.contextmanager
    def _deletes(self, path: str) -> Iterator[None]:
        """A registry that refuses deletes (405) said in one line naming the setting.

        Raises:
            Unsupported: the registry refused the delete (exit 2).
        """
        try:
            yield
        except Unsupported as exc:
            raise Unsupported(
                f"{self.url_of(path)}: the registry refuses deletes ({exc}); gc, and releasing "
                "a lease early, need them: enable them (the distribution registry: "
                "storage.delete.enabled: true; GHCR and Docker Hub allow none through the API)"
            ) from None

    PROBE = "probe"
    """The one temporary name :meth:`probe` writes: written again by every run, never deleted
    (a registry may refuse deletes), so at most one probe tag stays in the repository."""

    def probe(self, path: str) -> float | None:
        """Write the probe tag (:data:`PROBE`, whatever ``path`` says) twice with other bytes,
        so a repository whose tags are immutable, where no ref could move, is found before
        hours of work; nothing is deleted. The registry keeps no times: None.

        Raises:
            Unsupported: the repository's tags are immutable. StoreError: a write failed.
        """
        fixed = self.layout.tmp(self.PROBE)
        for _ in range(2):
            self.put(fixed, uuid.uuid4().hex.encode())
        return None


class BlobReader:
    """A blob read as one streaming ``GET``; a body that breaks is read on from where it broke
    (``Range``), each retry said on stderr, up to
    :data:`~neuronbuild.transports.retry.ATTEMPTS` reads; each body within its deadline
    (:func:`~neuronbuild.transports.oci_registry.body_deadline`). ``read(n)`` returns what one
    receive brings (at most ``n`` bytes; b"" only at the end), as a raw stream does.

    Raises:
        FileNotFoundError: the blob is absent (at the first read). StoreError: the body kept
            breaking. StoreDataInvalid: a body arrived too slowly.
    """

    def __init__(self, registry: Registry, digest: str) -> None:
        self.registry, self.digest, self.at = registry, digest, 0
        self.response: Any = registry.open_blob(digest)
        if self.response is None:
            raise FileNotFoundError(digest)
        self.deadline = self._deadline()
        self.breaks = [0]
        """Reads that broke so far: one budget for every read of the blob."""

    def _read_once(self, n: int) -> bytes:
        if self.response is None:  # reopened where the last body broke
            self.response = self.registry.open_blob(self.digest, self.at)
            if self.response is None:
                raise StoreError(f"{self.registry.where.url}: blob {self.digest}: gone")
            self.deadline = self._deadline()
        what = f"{self.registry.where.url}: blob {self.digest}"
        if n >= 0:  # what one receive brings: fewer bytes than asked, b"" only at the end
            chunk = read_before(self.response.raw, n, self.deadline, what)
        else:
            parts = iter(lambda: read_before(self.response.raw, 1 << 20, self.deadline, what), b"")
            chunk = b"".join(parts)
        self.at += len(chunk)
        return chunk

    def _deadline(self) -> float:
        """When the open body must end (:func:`~neuronbuild.transports.oci_registry.
        body_deadline` of the bytes its ``Content-Length`` announces)."""
        try:
            size = int(self.response.headers.get("Content-Length", 0))
        except ValueError:
            size = 0
        return body_deadline(size)

    def _drop(self) -> None:
        if self.response is not None:
            self.response.close()
        self.response = None

    def read(self, n: int = -1) -> bytes:
        import urllib3.exceptions
        from requests.exceptions import ConnectionError as RequestsConnectionError

        from neuronbuild.transports import retry

        broken = (urllib3.exceptions.HTTPError, RequestsConnectionError, OSError)
        return retry.retried(
            lambda: self._read_once(n),
            f"{self.registry.where.url}: blob {self.digest}",
            lambda exc: retry.Fault(retry.one_line(str(exc))) if isinstance(exc, broken) else None,
            spent=self.breaks,
            before_retry=self._drop,
            sleep=lambda seconds: time.sleep(seconds),
        )

    def close(self) -> None:
        if self.response is not None:
            self.response.close()

    def __enter__(self) -> BlobReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _blobs_named(kind: str, data: bytes) -> dict[str, int]:
    """The blobs a unit record or manifest names (digest -> size), for its layers; none for
    other kinds, or for bytes that are no record (its readers refuse them)."""
    try:
        if kind == "units":
            files = UnitRecord.from_bytes(data, "").files
        elif kind == "manifests":
            files = tuple(Manifest.from_bytes(data, "").files())
        else:
            return {}
    except (StoreDataInvalid, ValueError, KeyError, TypeError):
        return {}
    return {f.digest: f.size for f in files}


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _created(manifest: dict[str, Any]) -> float | None:
    """The writer's time of an object (seconds since the epoch), from its annotation."""
    annotations = manifest.get("annotations") or {}
    value = annotations.get(CREATED_ANNOTATION) if isinstance(annotations, dict) else None
    try:
        return datetime.datetime.fromisoformat(str(value)).timestamp() if value else None
    except ValueError:
        return None


def open_registry(url: str, last_writer_wins: bool, places: PlacesAt) -> RegistryBackend:
    """A registry store (``oci://``, ``oci+http://``; row ``oci`` of
    :data:`~neuronbuild.transports.schemes.SCHEMES`): atomic as :class:`RegistryBackend` says, so
    ``last_writer_wins`` changes nothing; its places are the store's layout, which it maps
    onto tags whatever ``places`` says."""
    return RegistryBackend(url)
