"""The plan: vLLM-Neuron's defaults, how buckets combine into graphs, and unit keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.engines.neuron.buckets import powers_of_two_then_max
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe, parse_recipe
from tests.conftest import (
    NEURON_TOOLCHAIN,
    RECIPES,
    REPO,
    can_unshare_uts,
    cpu_recipe,
    neuron_recipe,
)


def graphs_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [g.to_json() for g in build_plan(parse_recipe(data)).graphs]


def kinds(graphs: list[dict[str, Any]]) -> Counter[str]:
    return Counter(g["kind"] for g in graphs)


@pytest.mark.parametrize(
    ("start", "maximum", "expected"),
    [
        (128, 4096, [128, 256, 512, 1024, 2048, 4096]),
        (128, 3000, [128, 256, 512, 1024, 2048, 3000]),
        (128, 128, [128]),
        (128, 100, [100]),
        (1, 8, [1, 2, 4, 8]),
        (1, 6, [1, 2, 4, 6]),
        (1, 1, [1]),
        (2048, 10000, [2048, 4096, 8192, 10000]),
    ],
)
def test_default_buckets_are_powers_of_two_below_the_maximum_then_the_maximum(
    start: int, maximum: int, expected: list[int]
) -> None:
    assert powers_of_two_then_max(start, maximum) == expected


def test_reference_single_shot_example_gives_six_prefill_and_four_decode_graphs() -> None:
    plan = build_plan(load_recipe(RECIPES / "llama-3.3-70b-trn2.yaml"))
    assert plan.totals() == {"prefill": 6, "decode": 4}
    assert {"kind": "prefill", "num_batched_tokens": 128, "kv_segment_size": 0} in [
        g.to_json() for g in plan.graphs
    ]
    assert [u.phase for u in plan.units] == ["prefill", "decode"]


def test_reference_segmented_example_gives_one_prefill_and_four_decode_graphs() -> None:
    graphs = graphs_of(
        neuron_recipe(
            {
                "num_seqs_buckets": [1, 2, 4, 8],
                "kv_segment_size_buckets": [2048],
                "num_batched_tokens_buckets": [2048],
            },
            max_num_batched_tokens=2048,
            block_size=128,
        )
    )
    assert graphs[0] == {"kind": "prefill", "num_batched_tokens": 2048, "kv_segment_size": 2048}
    assert kinds(graphs) == {"prefill": 1, "decode": 4}
    assert build_plan(load_recipe(RECIPES / "llama-3.3-70b-trn2-segmented.yaml")).totals() == {
        "prefill": 1,
        "decode": 4,
    }


def test_defaults_without_bucket_lists() -> None:
    graphs = graphs_of(neuron_recipe())
    prefill = [g["num_batched_tokens"] for g in graphs if g["kind"] == "prefill"]
    decode = [g["batch"] for g in graphs if g["kind"] == "decode"]
    assert prefill == [128, 256, 512, 1024, 2048, 4096]
    assert decode == [1, 2, 4, 8]
    assert {g["context_length"] for g in graphs if g["kind"] == "decode"} == {4096}


def test_max_num_batched_tokens_defaults_to_the_largest_bucket() -> None:
    graphs = graphs_of(
        neuron_recipe({"num_batched_tokens_buckets": [1024, 4096]}, max_num_batched_tokens=None)
    )
    assert [g["num_batched_tokens"] for g in graphs if g["kind"] == "prefill"] == [1024, 4096]


def test_segmented_prefill_is_enabled_when_max_num_batched_tokens_is_below_max_model_len() -> None:
    graphs = graphs_of(neuron_recipe(max_model_len=32768, max_num_batched_tokens=8192))
    assert [g for g in graphs if g["kind"] == "prefill"] == [
        {"kind": "prefill", "num_batched_tokens": 8192, "kv_segment_size": 8192}
    ]


def test_decode_context_buckets_multiply_with_batch_buckets_plus_max_model_len() -> None:
    graphs = graphs_of(
        neuron_recipe({"num_seqs_buckets": [1, 8], "decode_context_length_buckets": [1024, 2048]})
    )
    decode = [(g["batch"], g["context_length"]) for g in graphs if g["kind"] == "decode"]
    assert decode == [(1, 1024), (1, 2048), (1, 4096), (8, 1024), (8, 2048), (8, 4096)]


def test_vision_graphs_follow_the_explicit_bucket_list() -> None:
    plan = build_plan(load_recipe(RECIPES / "qwen3-vl-8b-trn2.yaml"))
    vision = [g.to_json() for g in plan.graphs if g.kind == "vision"]
    assert vision == [
        {"kind": "vision", "num_vision_tokens": 2048},
        {"kind": "vision", "num_vision_tokens": 8192},
    ]
    assert plan.totals() == {"prefill": 1, "decode": 6, "vision": 2}


def test_vision_defaults_of_a_hub_model_are_capped_at_max_vision_seq_len() -> None:
    # max_model_len 8192 already reaches the cap whatever the model's merge factor (>= 1).
    graphs = graphs_of(
        neuron_recipe(
            max_model_len=8192,
            max_num_batched_tokens=8192,
            additional_config={
                "vision_neuron_config": {
                    "vision_attention_block_size": 1024,
                    "max_vision_seq_len": 8192,
                }
            },
        )
    )
    assert [g["num_vision_tokens"] for g in graphs if g["kind"] == "vision"] == [
        1024,
        2048,
        4096,
        8192,
    ]


def test_encoder_only_plans_only_vision_graphs() -> None:
    graphs = graphs_of(
        neuron_recipe(
            mm_encoder_only=True,
            additional_config={"vision_neuron_config": {"num_vision_tokens_buckets": [2048]}},
        )
    )
    assert graphs == [{"kind": "vision", "num_vision_tokens": 2048}]


def test_language_only_plans_no_vision_graphs() -> None:
    graphs = graphs_of(
        neuron_recipe(
            additional_config={
                "mm_language_model_only": True,
                "vision_neuron_config": {"num_vision_tokens_buckets": [2048]},
            }
        )
    )
    assert kinds(graphs) == {"prefill": 6, "decode": 4}


def test_cpu_target_plans_one_dynamic_graph() -> None:
    plan = build_plan(parse_recipe(cpu_recipe()))
    assert [g.to_json() for g in plan.graphs] == [{"kind": "dynamic"}]
    assert plan.units[0].key.factors["cpu_isa"] == "x86_64-v3"


def test_plan_json_has_name_target_engine_graphs_and_units() -> None:
    data = build_plan(load_recipe(RECIPES / "llama-3.3-70b-trn2.yaml")).to_json()
    assert (data["name"], data["target"], data["engine"]) == (
        "llama-3.3-70b-trn2",
        "trn2",
        "neuron",
    )
    assert len(data["graphs"]) == 10
    assert [u["factors"]["phase"] for u in data["units"]] == ["prefill", "decode"]
    assert data["units"][0]["key"].startswith("sha256:")
    assert data["units"][0]["graphs"] + data["units"][1]["graphs"] == data["graphs"]


# Unit keys.


def test_a_unit_is_one_phase_and_lists_its_graphs() -> None:
    plan = build_plan(load_recipe(RECIPES / "qwen3-vl-8b-trn2.yaml"))
    # Vision graphs are extracted only in the run that extracts prefill (fidelity row A9).
    assert [(u.phase, len(u.graphs)) for u in plan.units] == [("prefill", 3), ("decode", 6)]
    assert [{g.kind for g in u.graphs} for u in plan.units] == [{"prefill", "vision"}, {"decode"}]


def test_keys_cover_the_resolved_bucket_lists() -> None:
    # A unit compiles its whole run: adding a bucket changes the configuration, so every key.
    small = build_plan(parse_recipe(neuron_recipe({"num_seqs_buckets": [1, 8]})))
    large = build_plan(parse_recipe(neuron_recipe({"num_seqs_buckets": [1, 2, 8]})))
    assert not {u.key.digest for u in small.units} & {u.key.digest for u in large.units}
    nc = large.units[0].key.factors["engine_args"]["additional_config"]["neuron_config"]
    assert nc["num_seqs_buckets"] == [1, 2, 8]


def test_equivalent_spellings_of_the_defaults_give_one_key() -> None:
    implicit = build_plan(parse_recipe(neuron_recipe()))
    explicit = build_plan(
        parse_recipe(
            neuron_recipe(
                {
                    "num_batched_tokens_buckets": [128, 256, 512, 1024, 2048, 4096],
                    "num_seqs_buckets": [1, 2, 4, 8],
                }
            )
        )
    )
    assert [u.key.digest for u in implicit.units] == [u.key.digest for u in explicit.units]


@pytest.mark.parametrize(
    "change",
    [
        {"tensor_parallel_size": 16},
        {"target": "trn1"},
        {"model": "meta-llama/Llama-3.1-70B-Instruct"},
        {"revision": "abc123"},
        {"dtype": "float16"},
        {"toolchain": {**NEURON_TOOLCHAIN, "libtorch-neuronx-lite": "2.12.0.1.0.1284"}},
    ],
)
def test_a_factor_that_changes_compiler_output_changes_every_key(change: dict[str, Any]) -> None:
    base = {u.key.digest for u in build_plan(parse_recipe(neuron_recipe())).units}
    changed = {u.key.digest for u in build_plan(parse_recipe(neuron_recipe(**change))).units}
    assert not base & changed


def test_serving_only_arguments_do_not_change_keys() -> None:
    base = [u.key.digest for u in build_plan(parse_recipe(neuron_recipe())).units]
    named = [
        u.key.digest
        for u in build_plan(parse_recipe(neuron_recipe(served_model_name="llama"))).units
    ]
    assert base == named


def test_allow_listed_environment_variable_changes_keys(started_with: Any) -> None:
    started_with(NEURON_CC_FLAGS=None)
    before = build_plan(parse_recipe(neuron_recipe())).units[0].key
    started_with(NEURON_CC_FLAGS="-O3")
    after = build_plan(parse_recipe(neuron_recipe())).units[0].key
    assert after.differences(before.factors) == ["env"]


KEYS_SCRIPT = (
    "import json; from neuronbuild.plan import build_plan; from neuronbuild.recipe import "
    "load_recipe; print(json.dumps([u.key.digest for r in {paths!r} "
    "for u in build_plan(load_recipe(r)).units]))"
)


def test_unit_keys_do_not_depend_on_working_directory_user_or_host(tmp_path: Path) -> None:
    paths = sorted(str(p) for p in RECIPES.glob("*.yaml") if "cpu" not in p.name)
    script = KEYS_SCRIPT.format(paths=paths)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON")}
    here = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    other_env = {**env, "USER": "someone-else", "HOME": str(tmp_path), "HOSTNAME": "elsewhere"}
    command = [sys.executable, "-c", script]
    if sys.platform.startswith("linux") and can_unshare_uts():
        # A different host name, as seen by gethostname(), in a new UTS namespace.
        command = [
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname elsewhere && exec "$@"',
            "sh",
            *command,
        ]
    there = subprocess.run(
        command, env=other_env, cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(here) == json.loads(there)
    assert (
        len(json.loads(here)) == 2 + 2 + 2
    )  # phases of the three Neuron recipes (vision with prefill)


def test_cpu_engine_environment_is_controlled_and_keyed(started_with: Any) -> None:
    from neuronbuild.engines.vllm_cpu.engine import CpuEngine

    engine = CpuEngine()
    inherited = {
        "PATH": "/bin",
        "VLLM_NCCL_SO_PATH": "/x.so",  # a path vLLM hashes: dropped
        "VLLM_LOGGING_LEVEL": "DEBUG",  # on vLLM's ignore list: passes
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/x",  # a path: node-local, never keyed
        "VLLM_CPU_OMP_THREADS_BIND": "0-1",  # keyed: replaced by the unit's value
        "TORCHINDUCTOR_FREEZING": "1",  # keyed by prefix
    }
    keyed = {"VLLM_CPU_OMP_THREADS_BIND": "all", "LD_PRELOAD": "/evil.so"}
    env = engine.engine_env(inherited, keyed)
    assert env == {
        "PATH": "/bin",
        "VLLM_LOGGING_LEVEL": "DEBUG",
        "TORCHINDUCTOR_CACHE_DIR": "/tmp/x",
        "VLLM_CPU_OMP_THREADS_BIND": "all",
    }
    assert engine.removed_env(inherited) == ["VLLM_NCCL_SO_PATH"]
    assert engine.key_env_values(inherited) == {
        "TORCHINDUCTOR_FREEZING": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    }

    started_with(VLLM_CPU_OMP_THREADS_BIND=None)
    before = build_plan(parse_recipe(cpu_recipe())).units[0].key
    started_with(VLLM_CPU_OMP_THREADS_BIND="0-1")
    after = build_plan(parse_recipe(cpu_recipe())).units[0].key
    assert after.differences(before.factors) == ["env"]
