"""Test double of vLLM 0.24.0: ``LLM`` builds the engine on the platform a plugin registers."""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

__version__ = "0.24.0"


def current_platform() -> Any:
    """Like ``vllm.plugins.load_plugins_by_group("vllm.platform_plugins")``: every plugin's
    ``register()`` returns its platform class path or None; vLLM uses the one that is active."""
    for ep in importlib.metadata.entry_points(group="vllm.platform_plugins"):
        path = ep.load()()
        if path:
            module, _, name = path.rpartition(".")
            return getattr(importlib.import_module(module), name)()
    raise RuntimeError("Failed to infer device type: no platform plugin is active")


class LLM:
    """``vllm.LLM``: constructing it builds the engine (and, on Neuron, compiles or loads)."""

    def __init__(self, **engine_args: Any) -> None:
        current_platform().build_engine(engine_args)
