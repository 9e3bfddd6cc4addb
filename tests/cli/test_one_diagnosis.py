"""``doctor``, ``status`` and ``verify`` give one diagnosis of a unit's state in a store (issue 20):
each state of a table of them, made in a store that holds one sealed build, run through the three
commands, which must agree (and doctor no longer calls a sealed unit whose blob is gone "no
sealed build to compare with")."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from neuronbuild.store.cas import Store
from tests.lib.builders import cpu_recipe, model_folder, publish_build
from tests.lib.commands import neuronbuild_in_process as nb


def blob_of(store: Store, digest: str) -> Path:
    [unit] = store.get_manifest(digest).units
    return Path(store.layout.blob(unit.files[0].digest))


def record_of(store: Store, digest: str) -> Path:
    [unit] = store.get_manifest(digest).units
    return Path(store.layout.unit(unit.key))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-1])


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))


Damage = Callable[[Store, str], None]
STATES: dict[str, tuple[Damage, str]] = {
    "cached": (lambda store, digest: None, "cached"),
    "blob deleted": (lambda s, d: os.unlink(blob_of(s, d)), "blob-missing"),
    "blob truncated": (lambda s, d: truncate(blob_of(s, d)), "blob-missing"),
    "record deleted": (lambda s, d: os.unlink(record_of(s, d)), "no-record"),
    # Same size, other bytes: what compile reuses and a plain verify passes; --deep re-hashes.
    "blob corrupt": (lambda s, d: flip_a_byte(blob_of(s, d)), "cached"),
}
"""How each state is made in a store holding one sealed build, and the state all three give."""


@pytest.fixture
def built(tmp_path: Path) -> tuple[Store, str, Path]:
    """A folder store holding one sealed build of a one-unit CPU recipe, and that recipe."""
    store = Store(str(tmp_path / "store"), create=True)
    data = cpu_recipe(cpu_isa="host", model=str(model_folder(tmp_path)))
    digest = publish_build(store, data, tmp_path, "a")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(yaml.safe_dump(data, sort_keys=False))
    return store, digest, recipe


@pytest.mark.parametrize("name", sorted(STATES))
def test_doctor_status_and_verify_agree_on_every_state_of_a_unit(
    built: tuple[Store, str, Path], name: str
) -> None:
    store, digest, recipe = built
    damage, expected = STATES[name]
    damage(store, digest)
    [unit] = store.get_manifest(digest).units

    code, out, err = nb("doctor", str(recipe), "--cache", store.url, "--json")
    assert code == 0, err
    [diagnosed] = json.loads(out)["units"]
    code, out, err = nb("status", str(recipe), "--cache", store.url, "--json")
    assert code == 0, err
    status = json.loads(out)["recipe"]
    code, out, err = nb("verify", digest, "--cache", store.url, "--json")
    verified = json.loads(out)

    assert diagnosed["key"] == unit.key
    assert diagnosed["state"] == status["unit_states"][unit.key] == expected
    assert verified["unit_states"] == {unit.key: expected}
    assert diagnosed["cached"] is (expected == "cached") is verified["ok"]
    assert code == (0 if expected == "cached" else 2)
    assert status["n_graphs_by_kind"]["dynamic"]["missing"] == (expected != "cached")
    assert diagnosed["problems"] == verified["problems"]  # the same lines, naming each object
    assert diagnosed["sealed_in"] == f"tiny/latest ({digest})"


def test_doctor_says_a_sealed_unit_whose_blob_is_gone_is_incomplete_not_unsealed(
    built: tuple[Store, str, Path],
) -> None:
    store, digest, recipe = built
    blob = blob_of(store, digest)
    os.unlink(blob)
    code, out, err = nb("doctor", str(recipe), "--cache", store.url)
    assert code == 0, err
    assert "no sealed build" not in out
    lines = out.splitlines()
    assert lines[0] == (
        "0 of 1 unit cached, 1 missing: 1 with a blob missing or truncated (compile it again)"
    )
    assert f"     sealed in tiny/latest ({digest}), but incomplete (blob-missing); " in out
    assert any(line.strip().startswith(f"{store.url_of(str(blob))}: missing") for line in lines)


def test_a_deep_verify_names_the_corrupt_blob_the_others_cannot_see(
    built: tuple[Store, str, Path],
) -> None:
    store, digest, _ = built
    flip_a_byte(blob_of(store, digest))
    code, out, _ = nb("verify", digest, "--cache", store.url, "--deep", "--json")
    verified = json.loads(out)
    assert code == 2
    assert list(verified["unit_states"].values()) == ["blob-corrupt"]
    assert len(verified["problems"]) == 1


def test_an_unreadable_record_is_bad_data_for_all_three(built: tuple[Store, str, Path]) -> None:
    store, digest, recipe = built
    [unit] = store.get_manifest(digest).units
    record_of(store, digest).write_text("{not a record")
    results = {
        "doctor": nb("doctor", str(recipe), "--cache", store.url),
        "status": nb("status", str(recipe), "--cache", store.url),
        "verify": nb("verify", digest, "--cache", store.url),
    }
    for command, (code, _, err) in results.items():
        assert code == 2, (command, err)
        assert f"{store.url}: unit {unit.key}: malformed JSON" in err, (command, err)
        assert "Traceback" not in err
