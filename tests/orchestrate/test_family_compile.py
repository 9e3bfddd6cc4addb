"""A family compiled in one run seals together or not at all (issue 44): recipes of one name for
trn1 and trn2 compile side by side (a test double of the compile half, :mod:`tests.lib.fake_compiler`);
when a unit of one fails, no build of that name is sealed and its ref stays where it was, so no
node of the other target loses its build, and no node of this one finds its build dropped."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from neuronbuild.engines.compiler import CompileRun, EngineCommand
from neuronbuild.orchestrate.compile import compile_recipes
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from tests.lib.builders import model_folder, neuron_recipe
from tests.lib.fake_compiler import use_fake_compiler

BUCKETS = {"num_batched_tokens_buckets": [128, 4096], "num_seqs_buckets": [1, 8]}


def test_a_failed_build_of_a_family_seals_none_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = use_fake_compiler(monkeypatch)
    given = fake.run_command

    def run_command(run: CompileRun) -> EngineCommand:  # every trn1 unit fails
        fake.behaviour = {run.unit.label(): "exit70" if run.recipe.target == "trn1" else "ok"}
        return given(run)

    monkeypatch.setattr(fake, "run_command", run_command)
    model = str(model_folder(tmp_path))
    recipes = [
        parse_recipe(neuron_recipe(BUCKETS, name="fam", model=model, target=target))
        for target in ("trn1", "trn2")
    ]
    store = Store(str(tmp_path / "store"), create=True)
    done = compile_recipes(recipes, store, jobs=1, log_dir=tmp_path / "logs", stream=io.StringIO())
    assert done.failed and [r.failed > 0 for r in done.recipes] == [True, False]
    assert [r.manifest for r in done.recipes] == [None, None]
    assert store.get_ref("fam", "latest") is None and store.manifest_digests() == []
    # Once the failed target compiles, both are sealed as one index under one ref.
    monkeypatch.setattr(fake, "run_command", given)
    fake.behaviour = {}
    again = compile_recipes(recipes, store, jobs=1, log_dir=tmp_path / "logs", stream=io.StringIO())
    index = store.get_ref("fam", "latest")
    assert not again.failed and index is not None and store.is_index(index)
    assert {r.index for r in again.recipes} == {index}
    assert store.get_index(index).manifests() == sorted(r.manifest or "" for r in again.recipes)
