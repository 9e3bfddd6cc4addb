"""What a Neuron plan reads from the model's own ``config.json``: its vision section, its vision
token merge factor and patch size, and whether its architecture makes vLLM run it as pooling.

The config is read from a local model folder (it enters the unit key by content digest,
:mod:`neuronbuild.model_files`) or, for a hub id, from this host's Hugging Face cache at the
recipe's revision (which the key names); where this host has none, every fact is ``None`` and the
rules that need one name the recipe field that supplies it instead (fetching the config, as
vLLM at compile needs it anyway, is the other fix).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SPATIAL_MERGE_ARCHITECTURES = (
    "Qwen3VLForConditionalGeneration",
    "Qwen3VLMoeForConditionalGeneration",
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
)
"""vLLM-Neuron model classes implementing ``SupportsSpatialMerge`` and ``SupportsMaxPixels`` with
``vision_config.spatial_merge_size ** 2`` and ``max_pixels // patch_size ** 2``
(jinhuang12/vllm-neuron ``vllm_neuron/model/qwen3_vl/__init__.py``, ``qwen3_5/__init__.py``);
``vllm_neuron/utils/vision_utils.py`` ``get_vision_token_merge_factor`` returns 1 and
``get_max_pixels_token_count`` None for a class without them."""

INTERNVL_ARCHITECTURES = ("InternVLChatModel",)
"""vLLM-Neuron's InternVL merges ``round(1 / downsample_ratio ** 2)`` patches (default ratio 0.5)
into one token (its ``get_vision_token_merge_factor``); it implements no max_pixels cap."""

POOLING_SUFFIXES = (
    ("ForCausalLM", False),
    ("ForConditionalGeneration", False),
    ("ChatModel", False),
    ("LMHeadModel", False),
    ("ForTextEncoding", True),
    ("EmbeddingModel", True),
    ("ForSequenceClassification", True),
    ("ForTokenClassification", True),
    ("ForAudioClassification", True),
    ("ForImageClassification", True),
    ("ForVideoClassification", True),
    ("ClassificationModel", True),
    ("ForRewardModeling", True),
    ("RewardModel", True),
    ("Model", True),
)
"""vLLM's ``_SUFFIX_TO_DEFAULTS`` (``vllm/config/model.py``, vLLM 0.24), first match wins: whether
an architecture with ``runner: auto`` resolves to the pooling runner. vLLM asks its model registry
first and a sentence-transformers ``modules.json`` before that; neither is modelled (the suffix
table agrees with the registry for the architectures vLLM-Neuron ships)."""


@dataclass(frozen=True)
class ModelFacts:
    """The parts of a local model's ``config.json`` the plan uses.

    ``vision``: whether it has a ``vision_config`` section (vLLM-Neuron then creates a vision
    config, D13); ``merge_factor``: raw vision tokens per embedding token (1 when the model class
    declares none); ``patch_size``: the vision patch edge in pixels, None when the class has no
    max_pixels rule; ``pooling``: whether its first architecture resolves to vLLM's pooling runner;
    ``q_heads`` / ``kv_heads``: the text model's attention and KV head counts (None where the
    config does not say them plainly, see :func:`head_counts`).
    """

    vision: bool
    merge_factor: int
    patch_size: int | None
    pooling: bool
    q_heads: int | None = None
    kv_heads: int | None = None


def architecture_is_pooling(architecture: str) -> bool:
    """Whether vLLM's suffix table (:data:`POOLING_SUFFIXES`) runs ``architecture`` as pooling."""
    return next((pool for suffix, pool in POOLING_SUFFIXES if architecture.endswith(suffix)), False)


def _positive(value: Any) -> float | None:
    """``value`` as a positive number, or None (a malformed config reads as the field absent)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    return float(value)


def model_facts(config: Mapping[str, Any]) -> ModelFacts:
    """:class:`ModelFacts` of one ``config.json`` mapping (vLLM-Neuron looks at
    ``architectures[0]`` only, ``vision_utils.py``); a malformed field reads as absent."""
    architectures = config.get("architectures")
    arch = str(architectures[0]) if isinstance(architectures, list) and architectures else ""
    vision = config.get("vision_config")
    vc = vision if isinstance(vision, Mapping) else {}
    merge, patch = 1, None
    if arch in SPATIAL_MERGE_ARCHITECTURES:
        merge = int(_positive(vc.get("spatial_merge_size")) or 1) ** 2
        size = _positive(vc.get("patch_size"))
        patch = int(size) if size else None
    elif arch in INTERNVL_ARCHITECTURES:
        merge = round(1.0 / (_positive(config.get("downsample_ratio")) or 0.5) ** 2)
    q_heads, kv_heads = head_counts(config)
    return ModelFacts(
        vision="vision_config" in config,
        merge_factor=max(1, merge),
        patch_size=patch,
        pooling=architecture_is_pooling(arch),
        q_heads=q_heads,
        kv_heads=kv_heads,
    )


SPECIAL_KV_KEYS = (
    "multi_query",
    "n_head_kv",
    "num_kv_heads",
    "multi_query_group_num",
    "attn_config",
)
"""Config keys of model families whose KV head count vLLM's ``get_total_num_kv_heads`` reads its
own way (Falcon, MPT, DBRX, ChatGLM): their counts are left unknown here."""


def head_counts(config: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The text model's ``num_attention_heads`` and total KV heads as vLLM's
    ``ModelConfig.get_total_num_kv_heads`` reads a plain config: ``num_key_value_heads``, else
    the attention heads (multi-head attention); read from ``text_config`` where there is one.
    None for a count the config does not state plainly."""
    text = config.get("text_config")
    section = text if isinstance(text, Mapping) else config
    q, kv = section.get("num_attention_heads"), section.get("num_key_value_heads")
    q = q if isinstance(q, int) and not isinstance(q, bool) and q > 0 else None
    kv = kv if isinstance(kv, int) and not isinstance(kv, bool) and kv > 0 else None
    if kv is None and "num_key_value_heads" not in section:
        kv = None if any(k in section for k in SPECIAL_KV_KEYS) else q
    return q, kv
