"""Additions: files a node gives back to a build it served, which no compile host can write.

vLLM Neuron 0.29's native route saves each traced graph in a Precompile Cache under
``VLLM_CACHE_ROOT``, but only on a device start with ``VLLM_NEURON_BACKEND`` set and never in
CPU compile mode (how-to-precompile-cache.md, v2.33.0, 2026-10-13): a CPU compile host cannot
produce it. The first node that serves a build captures what its start wrote
(:mod:`neuronbuild_runtime.capture`) and publishes it as an addition to that manifest; later
nodes lay it out beside the manifest's files and skip the trace.

An addition is one object, ``additions/<manifest hex>/<name hex>.json``
(:mod:`neuronbuild.store.layout`): a DSSE envelope in canonical JSON (``payload``,
``payloadType``, ``signatures``) of an in-toto Statement v1 whose one subject is the manifest,
whose ``predicateType`` is :data:`ADDITION_TYPE` (never SLSA provenance:
:func:`neuronbuild.attest.envelope.read_attestation` refuses it, so an addition can never pass as
a build's attestation) and whose predicate is::

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

This module reads an addition as store data, unverified (the store needs its files: ``gc``
keeps their blobs, a copy carries them); signing and checking signatures is
:mod:`neuronbuild.attest.additions`'.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from neuronbuild.digest import check_digest, hex_of, parse_canonical, sha256_digest
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store.records import FileRecord

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
"""An in-toto Statement v1's ``_type`` (as :mod:`neuronbuild.attest.statement` writes it)."""

PAYLOAD_TYPE = "application/vnd.in-toto+json"
"""The DSSE payload type of an in-toto Statement (as :mod:`neuronbuild.attest.envelope`)."""

ADDITION_TYPE = "https://neuronbuild.dev/addition/v1"
"""The ``predicateType`` of an addition's Statement."""

PRECOMPILE_CACHE = "precompile-cache"
"""The kind of addition holding vLLM Neuron's Precompile Cache (traced graphs)."""

KINDS = (PRECOMPILE_CACHE,)
"""Every kind of addition; a policy's ``additions`` entry names signers per kind."""

MAX_FILES = 100_000
"""Most files one addition may list; more is hostile."""

MAX_SIGNATURES = 16
"""Most signatures one addition may carry."""

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
    ``files`` (paths relative to the layout root), and its envelope's ``payload`` and
    ``signatures`` (``(keyid, sig)`` as stored, unverified:
    :func:`neuronbuild.attest.additions.verified_by` checks them)."""

    name: str
    manifest: str
    kind: str
    node: NodeIdentity
    files: tuple[FileRecord, ...]
    payload: bytes
    signatures: tuple[tuple[str, str], ...]

    @property
    def keyids(self) -> tuple[str, ...]:
        """The keyids its signatures claim (none: unsigned)."""
        return tuple(keyid for keyid, _ in self.signatures)

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


def _str(value: Any, what: str, most: int = 255) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= most or not value.isprintable():
        raise StoreDataInvalid(f"{what}: expected a printable string of at most {most} characters")
    return value


def _node(data: Any, what: str) -> NodeIdentity:
    if not isinstance(data, dict) or set(data) != {"target", "installed", "host", "captured"}:
        raise StoreDataInvalid(f"{what}: node: expected exactly target, installed, host, captured")
    installed = data["installed"]
    if not isinstance(installed, dict) or not all(
        v is None or (isinstance(v, str) and len(v) <= 255 and v.isprintable())
        for v in installed.values()
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
        raise StoreDataInvalid(f"{what}: files: expected a list of 1 to {MAX_FILES}")
    files = tuple(FileRecord.from_json(f, what) for f in data)
    paths = [f.path for f in files]
    if len(set(paths)) != len(paths):
        raise StoreDataInvalid(f"{what}: a file listed twice")
    if any(PurePosixPath(p).parts[0] == OURS for p in paths):
        raise StoreDataInvalid(f"{what}: a file under {OURS}/, neuronbuild's own folder")
    return files


def _envelope(data: bytes, what: str) -> tuple[bytes, tuple[tuple[str, str], ...]]:
    """``(payload, signatures)`` of a canonical DSSE envelope of an in-toto Statement."""
    raw = parse_canonical(data, what)
    if not isinstance(raw, dict) or set(raw) != {"payload", "payloadType", "signatures"}:
        raise StoreDataInvalid(f"{what}: not a DSSE envelope (payload, payloadType, signatures)")
    if raw["payloadType"] != PAYLOAD_TYPE:
        found = ascii(raw["payloadType"])[:80]
        raise StoreDataInvalid(f"{what}: payload type {found}, expected {PAYLOAD_TYPE}")
    signatures = raw["signatures"]
    if not isinstance(signatures, list) or len(signatures) > MAX_SIGNATURES:
        raise StoreDataInvalid(f"{what}: expected at most {MAX_SIGNATURES} signatures")
    pairs = []
    for s in signatures:
        if not isinstance(s, dict) or set(s) != {"keyid", "sig"}:
            raise StoreDataInvalid(f"{what}: a signature that is not {{keyid, sig}}")
        pairs.append(
            (_str(s["keyid"], f"{what}: keyid", 128), _str(s["sig"], f"{what}: sig", 1024))
        )
    try:
        payload = base64.b64decode(str(raw["payload"]), validate=True)
    except (binascii.Error, ValueError):
        raise StoreDataInvalid(f"{what}: its payload is not base64") from None
    return payload, tuple(pairs)


def read_addition(data: bytes, what: str, manifest: str, name: str) -> Addition:
    """Parse addition object ``data``, stored as addition ``name`` of ``manifest``, unverified.

    Raises:
        StoreDataInvalid: not a canonical DSSE envelope of at most :data:`MAX_SIGNATURES`
            signatures, a payload whose ``sha256:`` is not ``name`` or that is not a canonical
            in-toto Statement v1 of :data:`ADDITION_TYPE` over ``manifest``, an unknown kind, or
            a malformed node or file list (a path that escapes the layout root, listed twice, or
            under ``.neuronbuild/``).
    """
    payload, signatures = _envelope(data, what)
    if sha256_digest(payload) != name:
        raise StoreDataInvalid(f"{what}: its Statement does not hash to its name")
    statement = parse_canonical(payload, f"{what}: payload")
    if not isinstance(statement, dict) or set(statement) != {
        "_type",
        "subject",
        "predicateType",
        "predicate",
    }:
        raise StoreDataInvalid(f"{what}: not an in-toto Statement v1")
    if statement["_type"] != STATEMENT_TYPE:
        found = ascii(statement["_type"])[:80]
        raise StoreDataInvalid(f"{what}: _type {found}, expected {STATEMENT_TYPE}")
    if statement["predicateType"] != ADDITION_TYPE:
        found = ascii(statement["predicateType"])[:80]
        raise StoreDataInvalid(f"{what}: predicate type {found}, expected {ADDITION_TYPE}")
    subjects = statement["subject"]
    if (
        not isinstance(subjects, list)
        or len(subjects) != 1
        or not isinstance(subjects[0], dict)
        or not isinstance(subjects[0].get("digest"), dict)
    ):
        raise StoreDataInvalid(f"{what}: expected exactly one subject with a digest")
    subject = check_digest("sha256:" + str(subjects[0]["digest"].get("sha256")), what)
    if subject != manifest:
        raise StoreDataInvalid(f"{what}: its Statement names another manifest, {subject}")
    predicate = statement["predicate"]
    if not isinstance(predicate, dict) or set(predicate) != {"kind", "node", "files"}:
        raise StoreDataInvalid(f"{what}: predicate: expected exactly kind, node, files")
    kind = predicate["kind"]
    if kind not in KINDS:
        raise StoreDataInvalid(f"{what}: kind {ascii(kind)[:40]}, expected one of {list(KINDS)}")
    node, files = _node(predicate["node"], what), _files(predicate["files"], what)
    return Addition(name, manifest, kind, node, files, payload, signatures)
