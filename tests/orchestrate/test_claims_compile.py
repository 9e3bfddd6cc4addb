"""The compile orchestration, driven by a fake compiler (tests/lib/fake_compiler.py) through the real
scheduler, store and seal: every unit that compiles is published even when others fail, hang or
leave incomplete entries; nothing is sealed and the ref does not move until every unit of the
plan is in the store; a rerun compiles only what is missing, then seals."""

from __future__ import annotations

import functools
import io
from pathlib import Path

import pytest

from neuronbuild.orchestrate import scheduler
from neuronbuild.orchestrate.compile import compile_recipe
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, parse_recipe
from neuronbuild.store.cas import Store
from tests.conftest import neuron_recipe
from tests.lib.claims import audit, model_folder
from tests.lib.fake_compiler import FakeCompiler, use_fake_compiler

BUCKETS = {"num_batched_tokens_buckets": [1024, 4096], "num_seqs_buckets": [1, 8]}
LABELS = [u.label() for u in build_plan(parse_recipe(neuron_recipe(BUCKETS))).units]


@pytest.fixture
def recipe(tmp_path: Path) -> Recipe:
    """A neuron recipe of four graphs whose model is a local folder (compile checks it is
    there)."""
    return parse_recipe(neuron_recipe(BUCKETS, name="fake", model=str(model_folder(tmp_path))))


@pytest.fixture
def compiler(monkeypatch: pytest.MonkeyPatch) -> FakeCompiler:
    return use_fake_compiler(monkeypatch)


def compile_(recipe: Recipe, store: Store, tmp_path: Path, **kw: object) -> object:
    return compile_recipe(
        recipe,
        store,
        jobs=2,
        log_dir=tmp_path / "logs",
        stream=io.StringIO(),
        **kw,  # type: ignore[arg-type]
    )


def test_every_unit_compiles_publishes_seals_and_moves_the_ref(
    compiler: FakeCompiler, recipe: Recipe, tmp_path: Path
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_(recipe, store, tmp_path)
    assert sorted(compiler.started) == sorted(LABELS) and len(LABELS) >= 2
    assert [u.status for u in report.units] == ["compiled"] * len(LABELS)  # type: ignore[attr-defined]
    assert store.get_ref("fake", "latest") == report.manifest  # type: ignore[attr-defined]
    manifest = store.get_manifest(report.manifest)  # type: ignore[attr-defined]
    assert [u.key for u in manifest.units] == [u.key.digest for u in build_plan(recipe).units]
    assert audit(store) == []
    again = compile_(recipe, store, tmp_path)
    assert [u.status for u in again.units] == ["cached"] * len(LABELS)  # type: ignore[attr-defined]
    assert again.manifest == report.manifest  # type: ignore[attr-defined]
    assert len(compiler.started) == len(LABELS)  # nothing compiled twice


@pytest.mark.parametrize("failure", ["exit70", "incomplete", "hang"])
def test_a_failed_unit_never_blocks_the_others_and_nothing_is_sealed_until_it_compiles(
    failure: str,
    compiler: FakeCompiler,
    recipe: Recipe,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The kill grace after SIGTERM is shortened: what is tested here is the orchestration.
    monkeypatch.setattr(scheduler, "end_group", functools.partial(scheduler.end_group, grace=0.5))
    store = Store(str(tmp_path / "store"), create=True)
    bad = LABELS[-1]
    compiler.behaviour = {bad: failure}
    report = compile_(recipe, store, tmp_path, timeout=2.0)
    status = {u.key: u for u in report.units}  # type: ignore[attr-defined]
    plan = build_plan(recipe)
    for unit in plan.units:
        entry = status[unit.key.digest]
        if unit.label() == bad:
            assert entry.status == "failed"
            expected = {
                "exit70": "engine exited with 70",
                "incomplete": "no complete entry",
                "hang": "timed out after 2.0 s",
            }[failure]
            assert expected in entry.error, entry.error
            assert store.get_unit(unit.key.digest) is None
            log = tmp_path / "logs" / f"{unit.key.hex}.log"
            assert f"fake compile of {unit.key.hex[:16]}" in log.read_text()  # kept
            # The log is named once at the end of the error line, and is a field of the outcome
            # when the engine's run failed (an error after it, as a harvest, carries no fields).
            assert entry.error.endswith(f"; log: {log}") and entry.error.count("log:") == 1
            assert entry.log == (None if failure == "incomplete" else str(log))
        else:
            assert entry.status == "compiled"
            assert set(store.cached_units([unit.key.digest])) == {unit.key.digest}
            assert not (tmp_path / "logs" / f"{unit.key.hex}.log").exists()
    assert report.manifest is None and report.ref is None  # type: ignore[attr-defined]
    assert store.manifest_digests() == [] and store.get_ref("fake", "latest") is None
    assert audit(store) == []

    compiler.behaviour, compiler.started = {}, []
    rerun = compile_(recipe, store, tmp_path)
    assert compiler.started == [bad]
    assert store.get_ref("fake", "latest") == rerun.manifest is not None  # type: ignore[attr-defined]
    assert audit(store) == []


def test_compile_recompiles_a_unit_whose_record_it_cannot_read(
    compiler: FakeCompiler, recipe: Recipe, tmp_path: Path
) -> None:
    """A unit record that cannot be read (here: not canonical JSON) is a miss for compile, which
    compiles the unit again and replaces the record, never exit 2 (``cached_records``)."""
    store = Store(str(tmp_path / "store"), create=True)
    first = compile_(recipe, store, tmp_path)
    key = first.units[0].key  # type: ignore[attr-defined]
    Path(store.layout.unit(key)).write_text("{not json")
    again = compile_(recipe, store, tmp_path)
    assert [u.status for u in again.units] == ["compiled"] + ["cached"] * (len(LABELS) - 1)  # type: ignore[attr-defined]
    assert store.get_unit(key) is not None and audit(store) == []
