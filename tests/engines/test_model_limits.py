"""Issue 42 item 4: a ``max_model_len`` above the model's own position limit, which vLLM refuses at
start (``_get_and_verify_max_len``), is refused by validate in one line naming the field, on any
host where the model's config is; where vLLM's rule is not the plain one, nothing is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.errors import RecipeInvalid
from neuronbuild.recipe import parse_recipe
from tests.engines.test_neuron_engine import setenv
from tests.lib.builders import cpu_recipe, model_folder, neuron_recipe
from tests.lib.commands import neuronbuild


def with_config(tmp_path: Path, config: dict[str, Any], engine: str, length: int) -> dict[str, Any]:
    model = str(model_folder(tmp_path, json.dumps(config)))
    if engine == "cpu":
        return cpu_recipe(model=model, max_model_len=length)
    return neuron_recipe(model=model, max_model_len=length, max_num_batched_tokens=length)


def fields(data: dict[str, Any]) -> list[str]:
    with pytest.raises(RecipeInvalid) as caught:
        parse_recipe(data)
    return [e.field for e in caught.value.errors]


@pytest.mark.parametrize("engine", ["cpu", "neuron"])
def test_a_max_model_len_past_the_configs_position_limit_is_refused_naming_the_field(
    tmp_path: Path, engine: str
) -> None:
    config = {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 2048}
    assert fields(with_config(tmp_path, config, engine, 4096)) == ["max_model_len"]
    parse_recipe(with_config(tmp_path, config, engine, 2048))  # at the limit: vLLM starts


def test_validate_says_it_in_one_line_with_the_limit_and_the_fix(tmp_path: Path) -> None:
    config = {"max_position_embeddings": 2048, "n_positions": 1024}  # the smallest key rules
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(with_config(tmp_path, config, "cpu", 4096)))
    result = neuronbuild("validate", str(path))
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "max_model_len=4096" in line and "n_positions=1024" in line
    assert "set max_model_len to 1024 or less" in line


def test_vllms_own_switch_lets_it_through(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = with_config(tmp_path, {"max_position_embeddings": 2048}, "cpu", 4096)
    for value in ("1", "true"):
        setenv(monkeypatch, "VLLM_ALLOW_LONG_MAX_MODEL_LEN", value)
        parse_recipe(data)
    setenv(monkeypatch, "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0")
    assert fields(data) == ["max_model_len"]


@pytest.mark.parametrize(
    "override", [{"hf_overrides": {"max_position_embeddings": 8192}}, {"hf_config_path": "other"}]
)
def test_a_config_vllm_reads_otherwise_is_not_judged(
    tmp_path: Path, override: dict[str, Any]
) -> None:
    config = {"max_position_embeddings": 2048}
    parse_recipe({**with_config(tmp_path, config, "cpu", 4096), **override})


def test_the_text_configs_limit_rules_a_multimodal_config(tmp_path: Path) -> None:
    config = {"max_position_embeddings": 99999, "text_config": {"max_position_embeddings": 2048}}
    assert fields(with_config(tmp_path, config, "cpu", 4096)) == ["max_model_len"]
    config = {"max_position_embeddings": 2048, "text_config": {"max_position_embeddings": 99999}}
    parse_recipe(with_config(tmp_path, config, "cpu", 4096))  # vLLM reads the text config


@pytest.mark.parametrize(
    "config",
    [
        # vLLM multiplies the limit by the scaling's factor
        {"max_position_embeddings": 2048, "rope_scaling": {"type": "linear", "factor": 4.0}},
        {"max_position_embeddings": 2048, "rope_parameters": {"rope_type": "dynamic"}},
        {
            "text_config": {
                "max_position_embeddings": 2048,
                "rope_parameters": {"full_attention": {"rope_type": "yarn", "factor": 4}},
            }
        },
        # model_max_length may raise it; a nested language config has a convertor of its own
        {"max_position_embeddings": 2048, "model_max_length": 8192},
        {"max_position_embeddings": 2048, "language_config": {"max_position_embeddings": 2048}},
        {},  # no key: vLLM takes the recipe's
    ],
)
def test_where_vllms_rule_is_not_the_plain_one_nothing_is_refused(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    parse_recipe(with_config(tmp_path, config, "cpu", 4096))


def test_an_unscaled_rope_section_leaves_the_limit_as_it_is(tmp_path: Path) -> None:
    rope = {"rope_type": "default", "rope_theta": 10000.0}
    config = {"max_position_embeddings": 2048, "rope_parameters": rope}
    assert fields(with_config(tmp_path, config, "cpu", 4096)) == ["max_model_len"]


def test_a_hub_model_whose_config_this_host_lacks_is_not_judged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    parse_recipe(cpu_recipe(model="org/name", revision="0" * 40, max_model_len=100000))
