"""Hostile and broken store data, for every kind of object and every command that reads it: bad
store data exits 2 with one line, never hangs, never reads without bound, never a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuronbuild.errors import StoreDataInvalid
from neuronbuild.keys import canonical_json, sha256_digest
from neuronbuild.store.cas import Store
from neuronbuild.store.layout import MAX_SMALL_BYTES
from neuronbuild.store.records import Manifest, RefMove, UnitRecord
from tests.conftest import cpu_recipe, neuronbuild, published_with_model, serve_without_vllm
from tests.lib.properties import examples

TIMEOUT = 30
"""Seconds a command may take on hostile data before the test calls it a hang."""


def nb(*args: str) -> subprocess.CompletedProcess[str]:
    return neuronbuild(*args, timeout=TIMEOUT)


def assert_bad_data(result: subprocess.CompletedProcess[str], *want: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    for text in want:
        assert text in result.stderr, (text, result.stderr)


@pytest.fixture
def published(tmp_path: Path) -> tuple[Store, str]:
    return published_with_model(tmp_path)


def stored(tmp_path: Path, data: bytes) -> tuple[Store, str]:
    """A store holding ``data`` as the manifest named by its hash."""
    store = Store(str(tmp_path / "store"), create=True)
    digest = sha256_digest(data)
    path = Path(store.layout.manifest(digest))
    path.parent.mkdir(parents=True)
    path.write_bytes(data)
    return store, digest


# Every kind of object, with the commands that read it.


def _fifo(path: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def _device(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


@pytest.mark.parametrize("plant", [_fifo, _device], ids=["named pipe", "device"])
@pytest.mark.slow
def test_a_special_file_in_place_of_any_object_is_bad_data_not_a_hang(
    published: tuple[Store, str], tmp_path: Path, write_recipe: Any, plant: Any
) -> None:
    store, digest = published
    manifest = store.get_manifest(digest)
    recipe = write_recipe(cpu_recipe(cpu_isa="host", model=str(tmp_path / "model")))
    blob = Path(store.layout.blob(manifest.files()[0].digest))
    unit = Path(store.layout.unit(manifest.units[0].key))
    [history] = Path(store.layout.history("tiny", "latest")).iterdir()
    pull = ["pull", digest, "--local-cache", str(tmp_path / "node")]
    cases = [
        # A special file has no size of its own: a blob in its place is missing.
        (blob, "", [["verify", digest, "--deep"], ["serve", "--manifest", digest], pull]),
        (unit, "not a", [["status", str(recipe)], ["doctor", str(recipe)], ["plan", str(recipe)]]),
        (history, "not a", [["ls", "--history"], ["gc", "--dry-run"]]),
        (
            Path(store.layout.manifest(digest)),
            "not a",
            [["verify", digest], ["tag", digest, "a/b"], pull],
        ),
        (
            Path(store.layout.ref("tiny", "latest")),
            "not a",
            [["ls"], ["status"], ["verify", "tiny/latest"]],
        ),
    ]
    for path, want, commands in cases:
        saved = path.read_bytes()
        plant(path)
        try:
            for args in commands:
                if args[0] == "serve":
                    root = str(tmp_path / "root")
                    result = serve_without_vllm(
                        *args[1:], "--cache", store.url, "--vllm-cache-root", root
                    )
                else:
                    result = nb(*args, "--cache", store.url)
                assert_bad_data(result, want)
        finally:
            path.unlink()
            path.write_bytes(saved)


def test_objects_larger_than_their_kind_allows_are_not_read_whole(
    published: tuple[Store, str],
) -> None:
    store, digest = published
    ref = Path(store.layout.ref("tiny", "latest"))
    ref.write_bytes(digest.encode() + b"\n" + b" " * (MAX_SMALL_BYTES * 4))
    assert_bad_data(nb("ls", "--cache", store.url), "larger than")


def test_a_blob_longer_than_declared_is_read_no_further(published: tuple[Store, str]) -> None:
    store, digest = published
    entry = store.get_manifest(digest).files()[0]
    blob = Path(store.layout.blob(entry.digest))
    with open(blob, "ab") as f:
        f.write(b"\0" * (8 << 20))
    out = blob.parent / "out"
    with pytest.raises(StoreDataInvalid, match="longer"):
        store.fetch_blob(entry, out)
    assert not out.exists()


# Parsing: any bytes, one outcome (a record, or StoreDataInvalid).

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


def valid_record(tmp: int = 0) -> dict[str, Any]:
    factors = {"schema": "t", "n": tmp}
    return {
        "schema": "neuronbuild.unit-record/1",
        "key": sha256_digest(canonical_json(factors)),
        "factors": factors,
        "graphs": [{"kind": "dynamic"}],
        "files": [{"path": "a/b", "digest": sha256_digest(b"x"), "size": 1, "executable": False}],
        "toolchain": {},
    }


def valid_manifest() -> dict[str, Any]:
    return {
        "schema": "neuronbuild.manifest/1",
        "name": "x",
        "recipe": {},
        "units": [valid_record()],
    }


PARSERS = [
    lambda b: UnitRecord.from_bytes(b, "t"),
    lambda b: Manifest.from_bytes(b, "t"),
    lambda b: RefMove.from_bytes(b, "t"),
]


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=200) | JSON.map(lambda v: json.dumps(v).encode()))
@pytest.mark.slow
def test_any_bytes_parse_to_a_record_or_bad_store_data(data: bytes) -> None:
    for parse in PARSERS:
        try:
            parsed = parse(data)
        except StoreDataInvalid:
            continue
        assert parsed.to_bytes() == data  # what is accepted is exactly its canonical form


@settings(max_examples=examples(200))
@given(
    path=st.sampled_from(["files", "graphs", "factors", "toolchain", "key"]),
    value=JSON,
)
def test_a_field_of_the_wrong_kind_is_bad_store_data(path: str, value: Any) -> None:
    record = valid_record()
    record[path] = value
    try:
        data = canonical_json(record)
    except ValueError:
        data = json.dumps(record).encode()  # NaN and infinities: refused as not canonical
    try:
        parsed = UnitRecord.from_bytes(data, "t")
    except StoreDataInvalid:
        return
    assert parsed.to_bytes() == data


NESTED = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: json.dumps(m, indent=1).encode(), "canonical"),
        (lambda m: json.dumps(m).encode(), "canonical"),
        (lambda m: canonical_json(m)[:-1] + b',"name":"x"}', "twice"),
        (lambda m: canonical_json({**m, "extra": 1}), "unexpected fields"),
        (
            lambda m: canonical_json(m).replace(b'"executable":false', b'"executable":"false"'),
            "true or false",
        ),
        (lambda m: canonical_json(m).replace(b'"size":1', b'"size":1.0'), "impossible"),
        (lambda m: canonical_json(m).replace(b'"size":1', b'"size":true'), "impossible"),
        (lambda m: canonical_json(m).replace(b'"recipe":{}', b'"recipe":{"x":NaN}'), "JSON"),
        (lambda m: canonical_json(m).replace(b'"recipe":{}', b'"recipe":{"x":Infinity}'), "JSON"),
        (lambda m: canonical_json(m).replace(b'"recipe":{}', b'"recipe":{"x":"\\ud800"}'), "JSON"),
        (lambda m: canonical_json(m).replace(b'"recipe":{}', b'"recipe":' + NESTED), "JSON"),
        (lambda m: canonical_json(m).replace(b'"path":"a/b"', b'"path":"a/\\ud800"'), "JSON"),
        (
            lambda m: canonical_json(m).replace(b'"path":"a/b"', b'"path":"' + b"d/" * 600 + b'f"'),
            "unsafe path",
        ),
        (
            lambda m: canonical_json(m).replace(b'"path":"a/b"', b'"path":"' + b"n" * 256 + b'"'),
            "unsafe path",
        ),
    ],
    ids=[
        "pretty-printed",
        "spaced",
        "duplicate key",
        "extra field",
        "executable as text",
        "size as float",
        "size as bool",
        "NaN",
        "infinity",
        "lone surrogate",
        "deeply nested",
        "lone surrogate in a path",
        "very deep path",
        "segment too long",
    ],
)
@pytest.mark.slow
def test_a_manifest_is_accepted_only_in_canonical_form_with_exact_types(
    mutate: Any, message: str, tmp_path: Path
) -> None:
    data = mutate(valid_manifest())
    with pytest.raises(StoreDataInvalid, match=message):
        Manifest.from_bytes(data, "t")
    # The same through the command line, stored under its own digest: exit 2, one line.
    store, digest = stored(tmp_path, data)
    result = nb("verify", digest, "--cache", store.url)
    assert_bad_data(result)
    assert result.stderr.strip().count("\n") == 0


def two_units(files_a: list[dict[str, Any]], files_b: list[dict[str, Any]]) -> dict[str, Any]:
    manifest = valid_manifest()
    a, b = valid_record(1), valid_record(2)
    a["files"], b["files"] = files_a, files_b
    manifest["units"] = [a, b]
    return manifest


def file(path: str, content: bytes = b"x", size: int = 1) -> dict[str, Any]:
    return {"path": path, "digest": sha256_digest(content), "size": size, "executable": False}


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (two_units([file("a/b")], [file("a/b", b"y")]), "claimed by"),
        (two_units([file("a/b")], [file("a/b/c", b"y")]), "both a file and the folder"),
        (two_units([file("a")], [file("b", b"x", 2)]), "two sizes"),
    ],
    ids=["one path, two units", "a file and a folder", "one digest, two sizes"],
)
@pytest.mark.slow
def test_layouts_a_manifest_cannot_describe_are_refused_when_parsed(
    manifest: dict[str, Any], message: str, tmp_path: Path
) -> None:
    data = canonical_json(manifest)
    with pytest.raises(StoreDataInvalid, match=message):
        Manifest.from_bytes(data, "t")
    store, digest = stored(tmp_path, data)
    for args in (["verify", digest, "--deep"], ["serve", "--manifest", digest, "--dry-run"]):
        assert_bad_data(nb(*args, "--cache", store.url), message)


def reseal(store: Store, digest: str, edit: Any) -> str:
    """Store an edited copy of a manifest under its own (new) digest."""
    raw = json.loads(Path(store.layout.manifest(digest)).read_bytes())
    edit(raw)
    data = canonical_json(raw)
    new = sha256_digest(data)
    Path(store.layout.manifest(new)).write_bytes(data)
    return new


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m["recipe"].update(max_model_len=512), "differ from its"),
        (lambda m: m.update(units=[]), "differ from its"),
    ],
    ids=["recipe edited after sealing", "no units at all"],
)
def test_serve_refuses_a_manifest_whose_recipe_does_not_plan_its_units(
    published: tuple[Store, str], edit: Any, message: str
) -> None:
    store, digest = published
    edited = reseal(store, digest, edit)
    assert_bad_data(nb("serve", "--manifest", edited, "--cache", store.url, "--dry-run"), message)


@pytest.mark.slow
def test_pull_re_checks_the_blobs_and_manifest_the_local_tier_holds(
    published: tuple[Store, str], tmp_path: Path
) -> None:
    store, digest = published
    node = tmp_path / "node"
    pull = ["pull", "tiny/latest", "--cache", store.url, "--local-cache", str(node)]
    assert nb(*pull).returncode == 0
    local = Store(str(node))
    entry = local.get_manifest(digest).files()[0]
    blob = Path(local.layout.blob(entry.digest))
    data = bytearray(blob.read_bytes())
    data[0] ^= 0xFF  # the same size, one bit flipped
    blob.write_bytes(bytes(data))
    Path(local.layout.manifest(digest)).write_bytes(b"{}")

    again = nb(*pull)
    assert again.returncode == 0, again.stderr
    assert "fetching it again" in again.stderr and "replacing it" in again.stderr
    verified = nb("verify", digest, "--deep", "--cache", str(node))
    assert verified.returncode == 0, verified.stderr


@pytest.mark.slow
def test_a_store_folder_nested_too_deeply_is_bad_data_not_a_traceback() -> None:
    # Outside pytest's tmp folders: removing them recurses and would fail on this tree.
    top = Path(tempfile.mkdtemp(prefix="neuronbuild-deep-"))
    here = os.getcwd()
    try:
        os.chdir(top)
        os.mkdir("refs")
        os.chdir("refs")
        for _ in range(1500):  # deeper than Python recurses; one level per call, within PATH_MAX
            os.mkdir("a")
            os.chdir("a")
        Path("tag").write_text("x")
        os.chdir(here)
        for args in (["ls"], ["gc", "--dry-run"], ["status"]):
            assert_bad_data(nb(*args, "--cache", str(top)), "nested too deeply")
    finally:  # the same way back, one level at a time
        os.chdir(top / "refs")
        levels = 0
        while os.path.isdir("a"):
            os.chdir("a")
            levels += 1
        Path("tag").unlink(missing_ok=True)
        for _ in range(levels):
            os.chdir("..")
            os.rmdir("a")
        os.chdir(here)
        shutil.rmtree(top)


@pytest.mark.parametrize(
    "shape", ["escapes with ..", "not the manifest's name", "the layouts folder"]
)
def test_gc_never_deletes_a_folder_a_hostile_layout_record_names(
    shape: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from neuronbuild.store.gc import collect_garbage

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "node-cache"))
    layouts = tmp_path / "node-cache" / "neuronbuild" / "layouts"
    victim = tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    (layouts / "0123456789abcdef").mkdir(parents=True)
    digest = sha256_digest(b"a manifest no ref names")
    root = {
        "escapes with ..": str(layouts / ".." / ".." / ".." / "victim"),
        "not the manifest's name": str(layouts / "0123456789abcdef"),
        "the layouts folder": str(layouts),
    }[shape]
    store = Store(str(tmp_path / "store"), create=True)
    record = Path(store.layout.layout_record(digest))
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_bytes(canonical_json({"root": root}))
    report = collect_garbage(store, older_than_days=0)
    assert len(report.deleted["layouts"]) == 1  # the record goes; the folder it names stays
    assert (victim / "keep").is_dir()
    assert (layouts / "0123456789abcdef").is_dir()
