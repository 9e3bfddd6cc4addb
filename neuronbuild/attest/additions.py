"""Additions: files a node gives back to a build it served, which no compile host can write.

vLLM Neuron 0.29's native route saves each traced graph in a Precompile Cache under
``VLLM_CACHE_ROOT``, but only on a device start with ``VLLM_NEURON_BACKEND`` set and never in
CPU compile mode (how-to-precompile-cache.md, v2.33.0, 2026-10-13): a CPU compile host cannot
produce it. The first node that serves a build captures what its start wrote
(:mod:`neuronbuild_runtime.capture`) and publishes it as an addition to that manifest; later
nodes lay it out beside the manifest's files and skip the trace.

An addition is one object, ``additions/<manifest hex>/<name hex>.json``
(:mod:`neuronbuild.store.layout`): a DSSE envelope (:mod:`.envelope`) of an in-toto Statement v1
whose one subject is the manifest, whose ``predicateType`` is :data:`ADDITION_TYPE` (never SLSA
provenance: :func:`~.envelope.read_attestation` refuses it, so an addition can never pass as a
build's attestation) and whose predicate is::

    {"kind": "precompile-cache",
     "node": {"target": "trn2", "installed": {DIST: "VERSION sha256:RECORD", ...},
              "host": "ip-10-0-0-1", "captured": "2026-12-06T10:00:00Z"},
     "files": [FileRecord, ...]}

Its name is the ``sha256:`` of the Statement's canonical bytes (the envelope's payload), so a
reader checks the object against its name; its files' blobs are stored before the object, so an
object present is a complete addition. The envelope carries the node's signature, or none: a
node with no trust policy lays out an unsigned addition (as it serves an unsigned manifest), one
with a policy only an addition a signer of its ``additions`` entry signed
(:meth:`neuronbuild.attest.policy.Policy.addition_refusal`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from securesystemslib.dsse import Envelope
from securesystemslib.signer import Key, Signer

from neuronbuild.attest.envelope import PAYLOAD_TYPE, Attestation, parse_json, read_envelope
from neuronbuild.attest.statement import STATEMENT_TYPE, statement_subject
from neuronbuild.digest import canonical_json, hex_of, sha256_digest
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store.records import FileRecord

ADDITION_TYPE = "https://neuronbuild.dev/addition/v1"
"""The ``predicateType`` of an addition's Statement."""

PRECOMPILE_CACHE = "precompile-cache"
"""The kind of addition holding vLLM Neuron's Precompile Cache (traced graphs)."""

KINDS = (PRECOMPILE_CACHE,)
"""Every kind of addition; a policy's ``additions`` entry names signers per kind."""

MAX_FILES = 100_000
"""Most files one addition may list; more is hostile."""

OURS = ".neuronbuild"
"""neuronbuild's own folder in a layout root (its stamp): never part of an addition."""


@dataclass(frozen=True)
class NodeIdentity:
    """The node an addition was captured on: the build's ``target``, the ``installed`` builds
    of the engine's toolchain there (distribution -> ``VERSION sha256:RECORD``, None when not
    installed: :func:`~neuronbuild.engines.versions.installed_builds`), its ``host`` name and
    when it ``captured`` (RFC 3339, UTC). A node lays an addition out only when its own target
    and installed builds are these."""

    target: str
    installed: dict[str, str | None]
    host: str
    captured: str

    def to_json(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "installed": dict(sorted(self.installed.items())),
            "host": self.host,
            "captured": self.captured,
        }


@dataclass(frozen=True)
class Addition:
    """One addition as read from a store, not yet trusted: its ``name`` (``sha256:`` of its
    Statement), the ``manifest`` it adds to, its ``kind``, the ``node`` it was captured on, its
    ``files`` (paths relative to the layout root) and its ``signed`` envelope (for
    :meth:`verified_by`)."""

    name: str
    manifest: str
    kind: str
    node: NodeIdentity
    files: tuple[FileRecord, ...]
    signed: Attestation

    @property
    def keyids(self) -> tuple[str, ...]:
        """The keyids its signatures claim (none: unsigned)."""
        return self.signed.keyids

    def verified_by(self, keys: list[Key]) -> str | None:
        """The keyid of the first of ``keys`` that signed it, else None."""
        return self.signed.verified_by(keys)

    def size(self) -> int:
        """Its files' total size in bytes."""
        return sum(f.size for f in self.files)


def addition_statement(
    manifest_name: str,
    manifest: str,
    kind: str,
    node: NodeIdentity,
    files: list[FileRecord],
) -> dict[str, Any]:
    """The in-toto Statement v1 of an addition of ``kind`` to manifest ``manifest`` (recipe
    ``manifest_name``): its files sorted by path."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": manifest_name, "digest": {"sha256": hex_of(manifest)}}],
        "predicateType": ADDITION_TYPE,
        "predicate": {
            "kind": kind,
            "node": node.to_json(),
            "files": [f.to_json() for f in sorted(files, key=lambda f: f.path)],
        },
    }


def seal_addition(statement: dict[str, Any], signer: Signer | None) -> tuple[str, bytes]:
    """``(name, bytes)`` of the addition object of ``statement``: its DSSE envelope (canonical
    JSON), signed by ``signer`` or by nobody, named by the ``sha256:`` of its payload."""
    payload = canonical_json(statement)
    envelope = Envelope(payload, PAYLOAD_TYPE, {})
    if signer is not None:
        envelope.sign(signer)
    return sha256_digest(payload), canonical_json(envelope.to_dict())


def _str(value: Any, what: str, most: int = 255) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= most or not value.isprintable():
        raise StoreDataInvalid(f"{what}: expected a printable string of at most {most} characters")
    return value


def _node(data: Any, what: str) -> NodeIdentity:
    if not isinstance(data, dict) or set(data) != {"target", "installed", "host", "captured"}:
        raise StoreDataInvalid(f"{what}: node: expected exactly target, installed, host, captured")
    installed = data["installed"]
    if not isinstance(installed, dict) or not all(
        isinstance(v, str | None) and (v is None or len(v) <= 255) for v in installed.values()
    ):
        raise StoreDataInvalid(f"{what}: node.installed: expected distribution -> build or null")
    return NodeIdentity(
        target=_str(data["target"], f"{what}: node.target", 32),
        installed={_str(k, f"{what}: node.installed", 128): v for k, v in installed.items()},
        host=_str(data["host"], f"{what}: node.host"),
        captured=_str(data["captured"], f"{what}: node.captured", 40),
    )


def _files(data: Any, what: str) -> tuple[FileRecord, ...]:
    if not isinstance(data, list) or not 0 < len(data) <= MAX_FILES:
        raise StoreDataInvalid(f"{what}: files: expected 1 to {MAX_FILES} files")
    files = tuple(FileRecord.from_json(f, what) for f in data)
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):
        raise StoreDataInvalid(f"{what}: a file listed twice")
    if any(PurePosixPath(p).parts[0] == OURS for p in paths):
        raise StoreDataInvalid(f"{what}: a file under {OURS}/, neuronbuild's own folder")
    return files


def read_addition(data: bytes, what: str, manifest: str, name: str) -> Addition:
    """Parse addition object ``data``, stored as addition ``name`` of ``manifest``, unverified.

    Raises:
        StoreDataInvalid: not a DSSE envelope (:func:`~.envelope.read_envelope`, no signature
            needed), a payload whose ``sha256:`` is not ``name``, a Statement of another predicate
            type or over another manifest, an unknown kind, or a malformed node or file list (a
            path that escapes the layout root, listed twice, or under ``.neuronbuild/``).
    """
    envelope, keyids = read_envelope(data, what, least=0)
    if sha256_digest(envelope.payload) != name:
        raise StoreDataInvalid(f"{what}: its Statement does not hash to its name")
    statement = parse_json(envelope.payload, f"{what}: payload")
    subject, predicate = statement_subject(statement, what, ADDITION_TYPE)
    if subject != manifest:
        raise StoreDataInvalid(f"{what}: its Statement names another manifest, {subject}")
    if set(predicate) != {"kind", "node", "files"}:
        raise StoreDataInvalid(f"{what}: predicate: expected exactly kind, node, files")
    kind = predicate["kind"]
    if kind not in KINDS:
        raise StoreDataInvalid(f"{what}: kind {ascii(kind)[:40]}, expected one of {list(KINDS)}")
    signed = Attestation(envelope, keyids, subject, predicate, ADDITION_TYPE)
    return Addition(
        name,
        manifest,
        kind,
        _node(predicate["node"], what),
        _files(predicate["files"], what),
        signed,
    )
