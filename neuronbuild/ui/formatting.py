"""Whether to colour human output (tables are :func:`neuronbuild.human.format_table`)."""

from __future__ import annotations

import sys

from neuronbuild import envs


def use_colour(err: bool = False) -> bool:
    """Whether to colour output to stdout (``err``: stderr): only on a terminal, and never when
    ``$NO_COLOR`` is set to anything (https://no-color.org)."""
    stream = sys.stderr if err else sys.stdout
    return stream.isatty() and not envs.NO_COLOR_SET.get()
