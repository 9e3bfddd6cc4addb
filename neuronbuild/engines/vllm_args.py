"""Turn a recipe's engine arguments into the command line of vLLM's OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from neuronbuild.data.vllm_data import server_options

API_SERVER = "vllm.entrypoints.openai.api_server"
"""The module vLLM's OpenAI-compatible server runs as: serve execs it, and the neuron compile
worker runs it too (one entry point, fidelity row A5)."""


def flag(name: str) -> str:
    """vLLM's option for an engine argument: ``max_model_len`` -> ``--max-model-len``."""
    return "--" + name.replace("_", "-")


def vllm_cli_args(engine_args: Mapping[str, Any], first: tuple[str, ...] = ("model",)) -> list[str]:
    """``--option value`` pairs vLLM's argument parser turns back into exactly ``engine_args``.

    Booleans become ``--x`` / ``--no-x`` (vLLM's BooleanOptionalAction; a false ``store_true``
    flag such as ``--headless``, which has no ``--no-`` form, is left out), mappings become JSON
    (vLLM parses JSON for its config arguments, e.g. ``--additional-config``), lists become one
    value each (``nargs="+"``), and None is left out (vLLM's default). Names in ``first`` (by
    default ``model``, as ``--model``) come first.
    """
    argv: list[str] = []
    for name, value in sorted(engine_args.items(), key=lambda kv: kv[0] not in first):
        if value is None:
            continue
        if isinstance(value, bool):
            negative = "--no-" + name.replace("_", "-")
            if value or negative in server_options() or flag(name) not in server_options():
                argv.append(flag(name) if value else negative)
        elif isinstance(value, Mapping):
            argv += [flag(name), json.dumps(value, sort_keys=True)]
        elif isinstance(value, list | tuple):
            argv += [flag(name), *(str(v) for v in value)]
        else:
            argv += [flag(name), str(value)]
    return argv
