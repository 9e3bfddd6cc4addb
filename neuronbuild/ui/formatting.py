"""Layout of human output: aligned tables and whether to colour."""

from __future__ import annotations

import sys

from neuronbuild import envs


def use_colour(err: bool = False) -> bool:
    """Whether to colour output to stdout (``err``: stderr): only on a terminal, and never when
    ``$NO_COLOR`` is set to anything (https://no-color.org)."""
    stream = sys.stderr if err else sys.stdout
    return stream.isatty() and not envs.NO_COLOR_SET.get()


def format_table(rows: list[list[str]], indent: str = "") -> list[str]:
    """Left-aligned columns, two spaces apart, the first row being the header."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [
        (indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]
