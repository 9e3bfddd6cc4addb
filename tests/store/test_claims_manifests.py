"""Hostile manifests are refused by the check that targets them, each in turn: every other
byte of the manifest is valid and canonical, so a refusal for an unrelated reason (not canonical
JSON, a missing field) cannot stand in for the check under test. ``verify`` and ``serve`` refuse
the same manifests, and ``serve`` writes nothing."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import StoreDataInvalid
from neuronbuild.keys import canonical_json, sha256_digest
from neuronbuild.orchestrate.verify import verify_manifest
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest
from neuronbuild.store.tiered import TieredStore
from neuronbuild_runtime.serve import ServeSource, prepare
from tests.conftest import cpu_recipe
from tests.lib.builders import model_folder, publish_units

Raw = dict[str, Any]


def file0(raw: Raw, **changes: Any) -> None:
    raw["units"][0]["files"][0].update(changes)


def rekeyed(raw: Raw, **factors: Any) -> None:
    """Change the unit's factors and its key with them (the key still matches)."""
    unit = raw["units"][0]
    unit["factors"].update(factors)
    unit["key"] = sha256_digest(canonical_json(unit["factors"]))


HOSTILE: dict[str, tuple[Callable[[Raw], None], str]] = {
    "parent path": (lambda r: file0(r, path="../../outside"), "unsafe path"),
    "absolute path": (lambda r: file0(r, path="/tmp/outside"), "unsafe path"),
    "dot segment": (lambda r: file0(r, path="cpu/./x"), "unsafe path"),
    "empty segment": (lambda r: file0(r, path="cpu//x"), "unsafe path"),
    "backslash": (lambda r: file0(r, path="cpu\\..\\x"), "unsafe path"),
    "control character": (lambda r: file0(r, path="cpu/a\nb"), "unsafe path"),
    "empty path": (lambda r: file0(r, path=""), "unsafe path"),
    "long segment": (lambda r: file0(r, path="cpu/" + "a" * 256), "unsafe path"),
    "long path": (lambda r: file0(r, path="/".join(["a" * 200] * 6)), "unsafe path"),
    "huge size": (lambda r: file0(r, size=(1 << 40) + 1), "size: impossible value"),
    "negative size": (lambda r: file0(r, size=-1), "size: impossible value"),
    "boolean size": (lambda r: file0(r, size=True), "size: impossible value"),
    "other algorithm": (lambda r: file0(r, digest="md5:" + "0" * 32), "not a sha256 digest"),
    "short digest": (lambda r: file0(r, digest="sha256:abc"), "not a sha256 digest"),
    "upper-case digest": (
        lambda r: file0(r, digest="sha256:" + "A" * 64),
        "not a sha256 digest",
    ),
    "executable not a boolean": (lambda r: file0(r, executable=1), "executable must be true"),
    "path listed twice": (
        lambda r: r["units"][0]["files"].append(copy.deepcopy(r["units"][0]["files"][0])),
        "a path is listed twice",
    ),
    "file and folder": (
        lambda r: r["units"][0]["files"][1].update(
            path=r["units"][0]["files"][0]["path"] + "/inner"
        ),
        "is both a file and the folder of",
    ),
    "one digest, two sizes": (
        lambda r: r["units"][0]["files"][1].update(
            digest=r["units"][0]["files"][0]["digest"],
            size=r["units"][0]["files"][0]["size"] + 1,
        ),
        "is listed with two sizes",
    ),
    "factors off their key": (
        lambda r: r["units"][0]["factors"].update(target="trn2"),
        "do not hash to its key",
    ),
    "unknown schema": (
        lambda r: r.update(schema="neuronbuild.manifest/9"),
        "unknown manifest schema",
    ),
    "unknown record schema": (
        lambda r: r["units"][0].update(schema="neuronbuild.unit-record/9"),
        "unknown unit record schema",
    ),
    "extra field": (lambda r: r.update(extra=1), "unexpected fields ['extra']"),
    "file extra field": (lambda r: file0(r, mode=420), "unexpected fields ['mode']"),
    "hostile name": (lambda r: r.update(name="../evil"), "is not a recipe name"),
    "no files": (lambda r: r["units"][0].update(files=[]), "must list its files"),
    "no units": (lambda r: r.update(units=[]), "differ from its 0 sealed units"),
    "recipe edited after sealing": (
        lambda r: r["recipe"].update(max_model_len=128),
        "differ from its 1 sealed unit;",
    ),
    "unit of another recipe": (lambda r: rekeyed(r, model="other/model"), "differ from its"),
}


@pytest.fixture
def published(tmp_path: Path) -> tuple[Store, Raw]:
    model = model_folder(tmp_path)
    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_units(
        store, cpu_recipe(name="evil", cpu_isa="host", model=str(model)), tmp_path, "a"
    )
    raw = json.loads(store.get_manifest(digest).to_bytes())
    return store, raw


def put_raw(store: Store, data: bytes, name: str | None = None) -> str:
    digest = name or sha256_digest(data)
    store.backend.put(store.layout.manifest(digest), data)
    return digest


def serve_dry(store: Store, digest: str, root: Path, workdir: Path) -> None:
    prepare(
        ServeSource(manifest=digest),
        TieredStore(store),
        cache_root=root,
        workdir=workdir,
    )


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_each_hostile_manifest_is_refused_by_the_check_that_targets_it(
    kind: str, published: tuple[Store, Raw], tmp_path: Path
) -> None:
    store, raw = published
    breaks, message = HOSTILE[kind]
    breaks(raw)
    data = canonical_json(raw)
    digest = put_raw(store, data)
    root = tmp_path / "deep" / "root"
    with pytest.raises(StoreDataInvalid) as refused:
        verify_manifest(store, digest)
        serve_dry(store, digest, root, tmp_path)  # for checks only serve applies
    assert message in str(refused.value), str(refused.value)
    with pytest.raises(StoreDataInvalid) as served:
        serve_dry(store, digest, root, tmp_path)
    assert message in str(served.value), str(served.value)
    assert not root.exists()
    assert not (tmp_path / "outside").exists() and not (tmp_path / "deep" / "outside").exists()


def test_the_untouched_manifest_is_accepted(published: tuple[Store, Raw], tmp_path: Path) -> None:
    """The baseline of the table above: without its break, the same manifest serves."""
    store, raw = published
    digest = put_raw(store, canonical_json(raw))
    assert not verify_manifest(store, digest, deep=True).problems
    serve_dry(store, digest, tmp_path / "root", tmp_path)
    assert (tmp_path / "root" / raw["units"][0]["files"][0]["path"]).is_file()


def test_bytes_that_do_not_hash_to_the_manifest_name_are_refused(
    published: tuple[Store, Raw],
) -> None:
    store, raw = published
    raw["recipe"]["seed"] = 1
    digest = put_raw(store, canonical_json(raw), name=sha256_digest(b"another manifest"))
    with pytest.raises(StoreDataInvalid, match="do not hash to"):
        store.get_manifest(digest)


def test_a_manifest_in_any_other_spelling_is_refused(published: tuple[Store, Raw]) -> None:
    store, raw = published
    for data in (json.dumps(raw).encode(), canonical_json(raw) + b"\n"):
        with pytest.raises(StoreDataInvalid, match="not in canonical form"):
            store.get_manifest(put_raw(store, data))
    with pytest.raises(StoreDataInvalid, match="malformed JSON"):
        store.get_manifest(put_raw(store, b'{"a":1,"a":2}'))


@pytest.mark.parametrize("delta", [-1, 1])
def test_a_blob_of_another_size_than_listed_is_never_laid_out(
    published: tuple[Store, Raw], tmp_path: Path, delta: int
) -> None:
    store, raw = published
    file0(raw, size=raw["units"][0]["files"][0]["size"] + delta)
    digest = put_raw(store, canonical_json(raw))
    assert Manifest.from_bytes(canonical_json(raw), "m", digest)  # well formed
    problems = verify_manifest(store, digest).problems
    assert len(problems) == 1 and "missing or not" in problems[0], problems
    root = tmp_path / "root"
    with pytest.raises(StoreDataInvalid, match="1 blob missing"):
        serve_dry(store, digest, root, tmp_path)
    assert not (root / raw["units"][0]["files"][0]["path"]).exists()


def test_a_blob_of_the_listed_size_but_other_bytes_is_never_laid_out(
    published: tuple[Store, Raw], tmp_path: Path
) -> None:
    store, raw = published
    digest = put_raw(store, canonical_json(raw))
    entry = store.get_manifest(digest).files()[0]
    blob = Path(store.layout.blob(entry.digest))
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert "is corrupt" in verify_manifest(store, digest, deep=True).problems[0]
    root = tmp_path / "root"
    with pytest.raises(StoreDataInvalid, match="is corrupt"):
        serve_dry(store, digest, root, tmp_path)
    assert not (root / entry.path).exists()
