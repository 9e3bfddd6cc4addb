"""The versioned shapes of ``--json`` output: one JSON Schema file per shape, ``<shape>.json``.

Every document a command prints with ``--json`` is one object whose ``schema`` field names its
shape and version, ``neuronbuild.<command>/<version>`` (``neuronbuild.error/1`` for a failure).
A version changes only when a field is removed or changes meaning; a new field may appear in any
version, so consumers should ignore fields they do not know. ``docs/json.md`` lists the shapes.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

VERSION = 1
"""The version every shape is at (bumped per shape, in its file, when one breaks)."""

ERROR = "error"
"""The shape of a failing command's output under ``--json``."""


def schema_id(shape: str) -> str:
    """``"plan"`` -> ``"neuronbuild.plan/1"``: the ``schema`` field of a document."""
    return f"neuronbuild.{shape}/{VERSION}"


def shapes() -> list[str]:
    """Every shape that ships with a schema file, by name (``plan``, ``error``, ...)."""
    files = resources.files(__name__).iterdir()
    return sorted(f.name.removesuffix(".json") for f in files if f.name.endswith(".json"))


def load(shape: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one shape.

    Raises:
        FileNotFoundError: no such shape ships.
    """
    text = resources.files(__name__).joinpath(f"{shape}.json").read_text(encoding="utf-8")
    return json.loads(text)  # type: ignore[no-any-return]
