"""The store's layout: every kind of object it holds and the one place that spells their paths.

```
<root>/blobs/sha256/<2 hex>/<64 hex>            file bytes, named by their sha256
<root>/units/<unit key hex>.json                UnitRecord (the first one written for a key wins)
<root>/manifests/<sha256 hex>.json              Manifest, named by the hash of its canonical bytes
<root>/indexes/<sha256 hex>.json                Index: several manifests of one recipe family
<root>/refs/<name>/<tag>                        manifest or index digest (a mutable name)
<root>/history/<name>/<tag>/<ns>-<hex16>.json   one RefMove per move of that ref
<root>/attestations/<manifest hex>/<keyid>.json a signed statement of that manifest (DSSE)
<root>/additions/<manifest hex>/<hex>.json      what a node gave back to that manifest (DSSE),
                                                named by the hash of its Statement
<root>/layouts/<manifest hex>.json              a node-local folder `serve` laid out (local tiers)
<root>/timings/<shape hex>/<unit key hex>.json  UnitTiming: how long a unit took to compile
<root>/leases/<unit key hex>.json               a builder compiling that unit now (advice only)
<root>/tmp/                                     temporary files of atomic writes
<root>/tmp/condemned/<manifest hex>/<run hex>   a gc run is about to delete that manifest
<root>/locks/refs/<name>/<tag>.lock             the lock of a ref's compare-and-swap (folders)
```

As bazel-remote's ``cache/`` owns its kinds, nothing outside this package builds a store path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from neuronbuild import envs
from neuronbuild.digest import hex_of
from neuronbuild.errors import StoreDataInvalid, UserError

REF_PART = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
"""One segment of a ref: a recipe name or a tag."""

MAX_RECORD_BYTES = 64 << 20
"""Largest unit record, manifest or layout record read (bytes); a bigger object is hostile."""
MAX_SMALL_BYTES = 4096
"""Largest ref or ref-history object read (bytes)."""
MAX_ATTESTATION_BYTES = 4 << 20
"""Largest attestation read (bytes): its predicate lists every unit key (80 bytes each) and the
recipe, so 4 MiB holds tens of thousands of units; a bigger object is hostile."""
MAX_ATTESTATIONS = 64
"""Most attestations one manifest may have in a store; more is hostile (each is read)."""
MAX_ADDITIONS = 64
"""Most additions one manifest may have in a store (:mod:`neuronbuild.attest.additions`); more is
hostile (each is read)."""

NODE_STAMP = ".neuronbuild/layout.json"
"""In a folder ``serve`` laid out: the manifest and each file's size, mtime and inode."""

IMAGE_STORE = ".neuronbuild/store"
"""In a node image: a folder store holding the image's manifest (and nothing else), so that the
image's mount alone is enough to serve it
(:func:`~neuronbuild.node.image_stamp.image_manifest_store`)."""

KINDS = (
    "blobs",
    "units",
    "manifests",
    "indexes",
    "refs",
    "history",
    "attestations",
    "additions",
    "probes",
    "receipts",
    "layouts",
    "timings",
    "leases",
    "tmp",
    "locks",
)
"""Every top-level folder of a store; anything else under the root is not ours."""


LATEST = "latest"
"""The tag ``compile`` moves (``<recipe name>/latest``), and the one a bare name means."""


def parse_ref(ref: str) -> tuple[str, str]:
    """``<name>/<tag>`` -> ``(name, tag)``; a bare ``<name>`` means ``<name>/latest`` (as
    docker's ``image`` means ``image:latest``).

    Raises:
        UserError: anything else (the message shows the expected form).
    """
    name, sep, tag = ref.partition("/")
    if not sep:
        tag = LATEST
    if not REF_PART.match(name) or not REF_PART.match(tag):
        raise UserError(
            f"ref {ref!r}: expected <name>/<tag> or <name> (for <name>/latest), "
            "e.g. cpu-tiny-llama/latest"
        )
    return name, tag


@dataclass(frozen=True)
class Layout:
    """The paths of one store whose root is ``root`` (a path of its fsspec file system)."""

    root: str

    def folder(self, kind: str) -> str:
        """The folder of one of :data:`KINDS`."""
        if kind not in KINDS:
            raise ValueError(f"not a store kind: {kind}")
        return f"{self.root}/{kind}"

    def blob(self, digest: str) -> str:
        """A blob's path, fanned out by its first two hex digits (Raises StoreDataInvalid for a
        value that is no sha256 digest, as every method here)."""
        hexdigest = hex_of(digest)
        return f"{self.root}/blobs/sha256/{hexdigest[:2]}/{hexdigest}"

    def unit(self, key: str) -> str:
        """The unit record of unit key ``key``."""
        return f"{self.root}/units/{hex_of(key)}.json"

    def manifest(self, digest: str) -> str:
        """The manifest named ``digest``."""
        return f"{self.root}/manifests/{hex_of(digest)}.json"

    def index(self, digest: str) -> str:
        """The index named ``digest`` (:mod:`neuronbuild.store.index`)."""
        return f"{self.root}/indexes/{hex_of(digest)}.json"

    def ref(self, name: str, tag: str) -> str:
        """The ref ``<name>/<tag>`` (both checked by :func:`parse_ref`)."""
        return f"{self.root}/refs/{name}/{tag}"

    def history(self, name: str, tag: str) -> str:
        """The folder of the ref's moves."""
        return f"{self.root}/history/{name}/{tag}"

    def history_entry(self, name: str, tag: str, time_ns: int, digest: str) -> str:
        """One move's object. The name holds the writer's clock (``time_ns``, nanoseconds) only
        to be unique and to break ties: history is ordered by the store's own modification
        times and walked by ``previous`` links (:meth:`~neuronbuild.store.cas.Store.ref_chain`),
        because a writer's clock may be off by minutes."""
        return f"{self.history(name, tag)}/{time_ns:020d}-{hex_of(digest)[:16]}.json"

    def attestations(self, manifest: str) -> str:
        """The folder of the attestations of manifest ``manifest``."""
        return f"{self.root}/attestations/{hex_of(manifest)}"

    def attestation(self, manifest: str, keyid: str) -> str:
        """The attestation of ``manifest`` signed by key ``keyid`` (64 lowercase hex: a
        securesystemslib keyid, see :mod:`neuronbuild.attest.keys`).

        Raises:
            StoreDataInvalid: ``keyid`` is not 64 lowercase hex.
        """
        if not re.fullmatch(r"[0-9a-f]{64}", keyid):
            raise StoreDataInvalid(f"keyid {ascii(keyid)[:80]}: expected 64 lowercase hex")
        return f"{self.attestations(manifest)}/{keyid}.json"

    def attestation_of(self, path: str) -> tuple[str, str] | None:
        """``(manifest digest, keyid)`` an attestation path names; None for a stray object."""
        rest = path.removeprefix(self.folder("attestations") + "/")
        manifest, _, name = rest.partition("/")
        if not re.fullmatch(r"[0-9a-f]{64}", manifest) or not re.fullmatch(
            r"[0-9a-f]{64}\.json", name
        ):
            return None
        return "sha256:" + manifest, name.removesuffix(".json")

    def additions(self, manifest: str) -> str:
        """The folder of the additions nodes gave back to manifest ``manifest``."""
        return f"{self.root}/additions/{hex_of(manifest)}"

    def addition(self, manifest: str, name: str) -> str:
        """The addition ``name`` (the ``sha256:`` digest of its Statement) of ``manifest``."""
        return f"{self.additions(manifest)}/{hex_of(name)}.json"

    def addition_of(self, path: str) -> tuple[str, str] | None:
        """``(manifest digest, addition name)`` an addition path names; None for a stray object."""
        return self._pair_of("additions", path)

    def probe(self, manifest: str) -> str:
        """The answers CI recorded for manifest ``manifest`` (:mod:`neuronbuild.node.probe`)."""
        return f"{self.root}/probes/{hex_of(manifest)}.json"

    def receipts(self, manifest: str) -> str:
        """The folder of the receipts nodes wrote for manifest ``manifest``."""
        return f"{self.root}/receipts/{hex_of(manifest)}"

    def receipt(self, manifest: str, name: str) -> str:
        """The receipt ``name`` (the ``sha256:`` digest of its bytes) of ``manifest``."""
        return f"{self.receipts(manifest)}/{hex_of(name)}.json"

    def receipt_of(self, path: str) -> tuple[str, str] | None:
        """``(manifest digest, receipt name)`` a receipt path names; None for a stray object."""
        return self._pair_of("receipts", path)

    def layout_record(self, manifest: str) -> str:
        """The record of a node folder ``serve`` laid manifest ``manifest`` out in."""
        return f"{self.root}/layouts/{hex_of(manifest)}.json"

    def timing(self, shape: str, key: str) -> str:
        """A unit's measured compile time, filed under its shape so that later builds of the
        same shape (another toolchain, say) find it with one listing."""
        return f"{self.root}/timings/{hex_of(shape)}/{hex_of(key)}.json"

    def timing_of(self, path: str) -> tuple[str, str] | None:
        """``(shape, key)`` digests a path under ``timings/`` names; None for a stray object."""
        return self._pair_of("timings", path)

    def _pair_of(self, kind: str, path: str) -> tuple[str, str] | None:
        """The two digests a ``<kind>/<64 hex>/<64 hex>.json`` path names; None for any other."""
        rest = path.removeprefix(self.folder(kind) + "/")
        first, _, name = rest.partition("/")
        if not re.fullmatch(r"[0-9a-f]{64}", first) or not re.fullmatch(
            r"[0-9a-f]{64}\.json", name
        ):
            return None
        return "sha256:" + first, "sha256:" + name.removesuffix(".json")

    def lease(self, key: str) -> str:
        """The lease of unit key ``key``: which builder compiles it now
        (:mod:`neuronbuild.store.leases`)."""
        return f"{self.root}/leases/{hex_of(key)}.json"

    def tmp(self, name: str) -> str:
        """A temporary object (``""``: the folder itself)."""
        return f"{self.root}/tmp/{name}"

    def condemned(self, manifest: str, run: str = "") -> str:
        """The marker gc run ``run`` (hex) writes before deleting ``manifest``; ``""``: the folder
        of every run's marker of that manifest (see :mod:`neuronbuild.store.gc`)."""
        return f"{self.root}/tmp/condemned/{hex_of(manifest)}/{run}".rstrip("/")

    def condemned_of(self, path: str) -> str | None:
        """The manifest a condemned marker at ``path`` names; None for any other object."""
        rest = path.removeprefix(self.tmp("condemned/"))
        name, sep, run = rest.partition("/")
        if rest == path or not sep or not re.fullmatch(r"[0-9a-f]{64}", name):
            return None
        return "sha256:" + name if re.fullmatch(r"[0-9a-f]{1,64}", run) else None

    def ref_lock(self, ref_path: str) -> str:
        """The lock file guarding compare-and-swap of ``ref_path`` (folder stores)."""
        return f"{self.root}/locks/{ref_path.removeprefix(self.root + '/')}.lock"

    def digest_of(self, kind: str, path: str) -> str | None:
        """The digest a blob, unit record, manifest or layout path names; None for a stray
        object (a name that is no digest, e.g. a leftover editor file)."""
        name = path.rsplit("/", 1)[-1]
        if kind != "blobs":
            if not name.endswith(".json"):
                return None
            name = name.removesuffix(".json")
        if not re.fullmatch(r"[0-9a-f]{64}", name):
            return None
        return "sha256:" + name

    def ref_of(self, path: str) -> tuple[str, str] | None:
        """``(name, tag)`` of a path under ``refs/``; None for anything that is not a ref."""
        name, _, tag = path.removeprefix(self.folder("refs") + "/").partition("/")
        return (name, tag) if REF_PART.match(name) and REF_PART.match(tag) else None


def node_layout_root(manifest: str) -> Path:
    """Where ``serve`` lays a manifest out on this node: ``$VLLM_CACHE_ROOT`` when set, else
    ``<user cache>/neuronbuild/layouts/<manifest hex, 16 digits>`` (node-local, never a store)."""
    return envs.CACHE_ROOT.get() or envs.user_cache() / "layouts" / hex_of(manifest)[:16]
