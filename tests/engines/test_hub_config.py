"""Issue 42 item 1: a hub model is planned from its own config.json where this host's Hugging Face
cache holds it at the recipe's revision, as a local folder is (vision section and merge factor,
row D13; a pooling architecture under ``runner: auto``, row D19; its position limit); where it
does not, validate says which facts it could not check and which field states each, as a warning
about the host that ``--strict`` leaves a warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.errors import RecipeInvalid
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, parse_recipe
from tests.lib.builders import neuron_recipe
from tests.lib.commands import neuronbuild
from tests.lib.hub import cache_config as hub_cache_config

REPO_ID = "org/some-model"
REVISION = "1" * 40


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, the one ``huggingface_hub`` reads in this process."""
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    return cache


def cache_config(hub: Path, config: dict[str, Any], revision: str = REVISION) -> None:
    """``config`` as REPO_ID's config.json at ``revision``, which ``main`` points at."""
    hub_cache_config(hub, REPO_ID, config, revision)


def hub_recipe(**args: Any) -> Recipe:
    return parse_recipe(neuron_recipe(model=REPO_ID, revision=REVISION, **args))


def kinds(recipe: Recipe) -> set[str]:
    return {g.kind for g in build_plan(recipe).graphs}


QWEN3_VL = {
    "architectures": ["Qwen3VLForConditionalGeneration"],
    "vision_config": {"spatial_merge_size": 2, "patch_size": 16},
}


def test_a_cached_vision_config_plans_the_encoders_graphs_with_its_merge_factor(
    hub: Path,
) -> None:
    assert "vision" not in kinds(hub_recipe())  # nothing cached: read as text-only
    cache_config(hub, QWEN3_VL)
    recipe = hub_recipe(max_model_len=256, max_num_batched_tokens=256)
    vision = [g for g in build_plan(recipe).graphs if g.kind == "vision"]
    # The top bucket is next_pow2(max_model_len x merge factor 2 ** 2) = 1024, under the cap.
    assert vision and max(v for g in vision for _, v in g.dims) == 1024
    assert not [w for w in recipe.warnings if "Hugging Face cache" in w]


def test_a_cached_pooling_architecture_with_runner_auto_plans_no_decode(hub: Path) -> None:
    assert "decode" in kinds(hub_recipe())
    cache_config(hub, {"architectures": ["Qwen3ForSequenceClassification"]})
    assert "decode" not in kinds(hub_recipe())


def test_the_config_of_another_revision_is_not_read(hub: Path) -> None:
    cache_config(hub, QWEN3_VL, revision="2" * 40)  # main, newer than the recipe's revision
    recipe = hub_recipe()
    assert "vision" not in kinds(recipe)
    assert [w for w in recipe.warnings if "Hugging Face cache" in w]


def test_a_cached_position_limit_refuses_a_longer_max_model_len(hub: Path) -> None:
    cache_config(hub, {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 2048})
    with pytest.raises(RecipeInvalid) as caught:
        hub_recipe()
    assert [e.field for e in caught.value.errors] == ["max_model_len"]


def test_without_the_config_validate_names_each_fact_and_its_field_and_strict_passes(
    hub: Path, tmp_path: Path
) -> None:
    recipe = hub_recipe()
    (line,) = [w for w in recipe.warnings if "Hugging Face cache" in w]
    assert line in recipe.host_warnings
    for words in (
        f"model {REPO_ID}: its config.json (revision {REVISION})",
        "vision encoder (state it with additional_config.vision_neuron_config: {})",
        "merge factor (list additional_config.vision_neuron_config.num_vision_tokens_buckets)",
        "patch size (for mm_processor_kwargs.max_pixels)",
        "pooling model (set runner)",
        f"hf download {REPO_ID} config.json --revision {REVISION}",
    ):
        assert words in line, words
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(neuron_recipe(model=REPO_ID, revision=REVISION)))
    result = neuronbuild("validate", "--strict", str(path))
    assert result.returncode == 0, result.stderr
    assert "Hugging Face cache" in result.stderr
