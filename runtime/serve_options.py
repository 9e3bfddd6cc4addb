"""Split ``serve``'s command line into its own options and vLLM server options to pass through.

Every option of vLLM's OpenAI server (``data/vllm_server_options.txt``) that cannot change what
was compiled passes through, with as many values as vLLM's parser takes (so a value such as
``512`` is never mistaken for the RECIPE argument). An option that maps to a keyed engine
argument is refused (the recipe fixes it), and an unknown one is reported as unknown, with the
closest known spelling.
"""

from __future__ import annotations

from collections.abc import Mapping

from neuronbuild.data.vllm_data import ServerOption, server_options
from neuronbuild.engines.arg_classes import KEYED_ARGS, OWN_FACTORS
from neuronbuild.errors import UserError, did_you_mean


def value_count(option: ServerOption, token: str, rest: list[str]) -> int:
    """How many of ``rest`` are values of ``option`` given as ``token``."""
    if "=" in token or option.nargs == "0":
        return 0
    if option.nargs == "1":
        return 1
    count = 0
    while count < len(rest) and not rest[count].startswith("-"):
        count += 1
        if option.nargs == "?":
            break
    return count


def split_serve_args(args: list[str], own: Mapping[str, bool]) -> tuple[list[str], list[str]]:
    """``(serve's own args, vLLM options to pass through)`` of ``args``.

    ``own`` maps each of serve's own option spellings to whether it takes a value.

    Raises:
        UserError: an option vLLM's server does not know (with a did-you-mean), or one whose
            argument enters the unit key.
    """
    vllm = server_options()
    mine: list[str] = []
    passed: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        name = token.split("=", 1)[0]
        if not token.startswith("-") or token == "-" or name in own or token == "--":
            takes = own.get(name, False) and "=" not in token
            mine += args[i : i + 1 + takes]
            i += 1 + takes
            continue
        option = vllm.get(name)
        if option is None:
            close = did_you_mean(name, {*own, *vllm})
            hint = f"; did you mean {close}?" if close else "; see neuronbuild serve --help"
            raise UserError(f"{name}: unknown option{hint}")
        dest = option.dest
        if dest in KEYED_ARGS or dest in OWN_FACTORS:
            raise UserError(
                f"{name}: {dest} is part of the unit key and fixed by the recipe; change the "
                "recipe and compile it, then serve"
            )
        count = value_count(option, token, args[i + 1 :])
        passed += args[i : i + 1 + count]
        i += 1 + count
    return mine, passed
