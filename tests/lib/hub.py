"""A Hugging Face cache on disk, as ``huggingface_hub`` lays one out, for tests of hub models:
vLLM and the plan read a hub model's ``config.json`` from there offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def cache_config(
    hub: Path, repo_id: str, config: dict[str, Any], revision: str, main: bool = True
) -> None:
    """``config`` as ``repo_id``'s config.json at ``revision`` in the cache folder ``hub``
    (``HF_HUB_CACHE``), which ``main`` points at unless ``main`` is False."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    (repo / "snapshots" / revision).mkdir(parents=True, exist_ok=True)
    (repo / "snapshots" / revision / "config.json").write_text(json.dumps(config))
    if main:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(revision)
