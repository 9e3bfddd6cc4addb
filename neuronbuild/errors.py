"""Error types raised by neuronbuild, formatted once at the CLI edge.

Exit codes follow DESIGN.md: 2 for bad input (:class:`UserError` and subclasses), 3 for store or
network failures after retries (:class:`StoreError`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def show(value: Any) -> str:
    """Render a recipe value compactly for a one-line message (JSON where possible)."""
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


class UserError(Exception):
    """A mistake in what the user gave us (arguments, recipe, store data): exit code 2."""

    exit_code = 2


@dataclass(frozen=True)
class RecipeError:
    """One problem in a recipe.

    ``field`` is the dotted path of the key (``additional_config.neuron_config.num_seqs_buckets``),
    ``value`` what the recipe holds there (``MISSING`` when absent), ``hint`` the fix.
    """

    field: str
    value: Any
    hint: str

    def __str__(self) -> str:
        if self.value is MISSING:
            return f"{self.field}: {self.hint}"
        return f"{self.field}={show(self.value)}: {self.hint}"


class _Missing:
    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()
"""Sentinel for a recipe key that is absent (distinct from an explicit ``null``)."""


class RecipeInvalid(UserError):
    """A recipe failed validation; ``errors`` holds every problem found, in recipe order."""

    def __init__(self, source: str, errors: list[RecipeError]) -> None:
        self.source = source
        self.errors = errors
        super().__init__("\n".join(f"{source}: {e}" for e in errors))


class StoreError(Exception):
    """The store (a folder or a remote URL) failed after retries: exit code 3."""

    exit_code = 3


class StoreDataInvalid(UserError):
    """Data read from a store is malformed, hostile or incomplete: exit code 2."""
