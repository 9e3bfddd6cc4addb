"""Recipes that are not what they claim (issue 19): a file that is no recipe (a device, a FIFO, a
bomb of aliases, nesting or digits), values compile and serve would read differently, and builds
too big for the store's readers. Each is refused in one line, exit 2, before anything runs."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.errors import RecipeInvalid, UserError
from neuronbuild.recipe import MAX_RECIPE_BYTES, load_recipe, parse_recipe
from tests.conftest import cpu_recipe, neuron_recipe
from tests.lib.commands import neuronbuild

BOMB = "\n".join(
    [
        "name: bomb",
        "target: cpu",
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
        *(
            f"{n}: &{n} [" + ",".join([f"*{prev}"] * 9) + "]"
            for prev, n in zip("abcdefgh", "bcdefghi", strict=True)
        ),
    ]
)
"""A billion laughs: 364 bytes that expand to 9**9 strings (pyyaml takes minutes and gigabytes)."""


def refused_in_one_line(path: Path | str, *needles: str) -> str:
    """``neuronbuild validate PATH`` exits 2 with one line naming the problem, no traceback."""
    result = neuronbuild("validate", str(path), timeout=60)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_a_yaml_alias_bomb_is_refused_at_its_first_anchor_in_well_under_a_second(
    tmp_path: Path,
) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(BOMB)
    start = time.monotonic()
    with pytest.raises(RecipeInvalid, match="anchors and aliases"):
        load_recipe(path)
    assert time.monotonic() - start < 2.0  # a regression guard, not a benchmark
    refused_in_one_line(path, "line 3", "write the value out")


def test_dev_zero_as_the_recipe_is_refused_without_reading_it() -> None:
    refused_in_one_line("/dev/zero", "not a regular file")


def test_a_fifo_as_the_recipe_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "recipe.yaml"
    os.mkfifo(fifo)
    refused_in_one_line(fifo, "not a regular file")  # timeout=60: a blocking open would hang


def test_a_directory_as_the_recipe_is_refused_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(RecipeInvalid, match="is a directory, not a regular file"):
        load_recipe(tmp_path)


def test_a_recipe_over_the_size_cap_is_refused_naming_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(cpu_recipe()) + "#" * MAX_RECIPE_BYTES)
    refused_in_one_line(path, "larger than 262 kB")


def test_an_integer_of_5000_digits_is_refused_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "digits.yaml"
    path.write_text(yaml.safe_dump(cpu_recipe()) + "seed: " + "9" * 5000 + "\n")
    refused_in_one_line(path, "an integer of 5000 digits")


def test_nesting_100000_deep_is_refused_fast(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(
        yaml.safe_dump(cpu_recipe()) + "hf_overrides: " + "[" * 100_000 + "]" * 100_000 + "\n"
    )
    start = time.monotonic()
    with pytest.raises(RecipeInvalid, match="more than 16 levels deep"):
        load_recipe(path)
    assert time.monotonic() - start < 2.0
    refused_in_one_line(path, "levels deep")


def test_a_recipe_of_more_values_than_a_config_holds_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text(
        yaml.safe_dump(cpu_recipe()) + "hf_overrides: {x: [" + ",".join(["1"] * 30_000) + "]}\n"
    )
    refused_in_one_line(path, "more than 20000 values")


@pytest.mark.parametrize(
    ("args", "field", "hint"),
    [
        ({"seed": True}, "seed", "must be an integer"),
        ({"seed": 1 << 32}, "seed", "at most 4294967295"),
        ({"seed": -1}, "seed", "at least 0"),
        ({"max_model_len": "4096"}, "max_model_len", "must be an integer"),
        ({"max_model_len": 10**30}, "max_model_len", "at most 16777216"),
        ({"max_num_seqs": 4.0}, "max_num_seqs", "must be an integer"),
        ({"max_num_batched_tokens": 1 << 25}, "max_num_batched_tokens", "at most"),
        ({"kv_cache_memory_bytes": "1G"}, "kv_cache_memory_bytes", "without quotes"),
        ({"kv_cache_memory_bytes": 1.5e9}, "kv_cache_memory_bytes", "must be an integer"),
        ({"gpu_memory_utilization": "0.5"}, "gpu_memory_utilization", "must be a number"),
        ({"enforce_eager": "yes"}, "enforce_eager", "must be true or false"),
        ({"enforce_eager": 1}, "enforce_eager", "must be true or false"),
        ({"dtype": "fp8"}, "dtype", "must be one of auto, bfloat16"),
        ({"cudagraph_capture_sizes": 8}, "cudagraph_capture_sizes", "non-empty list"),
        ({"cudagraph_capture_sizes": []}, "cudagraph_capture_sizes", "non-empty list"),
        ({"cudagraph_capture_sizes": ["8"]}, "cudagraph_capture_sizes", "each item"),
        ({"limit_mm_per_prompt": "image=2"}, "limit_mm_per_prompt", "must be"),
        ({"hf_overrides": {"n": 1 << 64}}, "hf_overrides.n", "must be between"),
    ],
)
def test_a_value_compile_and_serve_would_read_apart_is_refused_with_its_field(
    args: dict[str, Any], field: str, hint: str
) -> None:
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(cpu_recipe(**args))
    messages = [str(e) for e in caught.value.errors]
    assert any(m.startswith(f"{field}=") and hint in m for m in messages), messages


def test_seed_true_fails_validate_on_the_command_line(tmp_path: Path) -> None:
    path = tmp_path / "seed.yaml"
    path.write_text(yaml.safe_dump(cpu_recipe(seed=True)))
    refused_in_one_line(path, "seed=true", "must be an integer")


def test_a_serve_option_of_the_wrong_kind_is_refused_with_its_place() -> None:
    with pytest.raises(RecipeInvalid, match=r"serve\.port=\"8000\": must be an integer"):
        parse_recipe(cpu_recipe(serve={"port": "8000"}))


@pytest.mark.parametrize(
    "args",
    [
        {"served_model_name": "tiny"},  # EngineArgs takes str | list[str]
        {"served_model_name": ["tiny", "small"]},
        {"optimization_level": 2},  # the CLI gives "2"; vLLM reads OptimizationLevel(2)
        {"kv_cache_dtype_skip_layers": []},  # its default: left out of argv
        {"gpu_memory_utilization": 1},  # float("1") == 1
        {"hf_overrides": {"max_position_embeddings": 512}},
        {"additional_config": '{"a": 1}'},
    ],
)
def test_values_vllms_command_line_gives_back_as_they_are_pass(args: dict[str, Any]) -> None:
    parse_recipe(cpu_recipe(**args))


def test_neuron_recipe_sizes_keep_their_ranges() -> None:
    with pytest.raises(RecipeInvalid, match=r"tensor_parallel_size=65537: must be at most 65536"):
        parse_recipe(neuron_recipe(tensor_parallel_size=65537))


def test_plan_refuses_a_build_whose_manifest_would_be_over_the_readers_cap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import neuronbuild.orchestrate.seal as seal
    from neuronbuild.plan import build_plan

    plan = build_plan(parse_recipe(neuron_recipe()))
    floor = seal.manifest_floor_bytes(plan)
    monkeypatch.setattr(seal, "MAX_RECORD_BYTES", floor - 1)
    with pytest.raises(UserError, match=rf"at least {floor} bytes, over the {floor - 1}.*fewer"):
        seal.check_manifest_fits(plan)
    monkeypatch.setattr(seal, "MAX_RECORD_BYTES", floor)
    seal.check_manifest_fits(plan)  # at the cap: fits


def test_a_manifest_over_the_readers_cap_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import neuronbuild.store.cas as cas
    import neuronbuild.store.gc as gc
    from neuronbuild.store.cas import Store
    from tests.lib.builders import publish_units

    cap = 8000  # every reader of the store (get_manifest, gc) and its writer; a unit record fits
    monkeypatch.setattr(cas, "MAX_RECORD_BYTES", cap)
    monkeypatch.setattr(gc, "MAX_RECORD_BYTES", cap)
    store = Store(str(tmp_path / "store"), create=True)
    with pytest.raises(UserError, match=rf"manifest of \d+ bytes, over the {cap}.*fewer buckets"):
        publish_units(store, neuron_recipe(), tmp_path, "a")
    assert store.manifest_digests() == [] and store.refs() == {}
    gc.collect_garbage(store, older_than_days=0)  # today's code sealed it, and gc then failed
