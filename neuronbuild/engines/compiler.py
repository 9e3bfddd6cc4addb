"""The compile half of an engine: what one unit's compile runs, and what it leaves behind.

Kept apart from the planning half so that the runtime, which plans to check keys, never imports
anything that compiles.
"""

from __future__ import annotations

import importlib.metadata
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from neuronbuild.graph import CompileUnit

if TYPE_CHECKING:
    from neuronbuild.recipe import Recipe


@dataclass(frozen=True)
class EngineCommand:
    """One engine process: ``argv`` run in ``cwd`` with exactly ``env``."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


class UnitCompiler(ABC):
    """Runs one compile unit in a subprocess and harvests the complete entries it wrote."""

    def check_install(self) -> None:
        """Raise UserError, saying how to fix it, when the engine's packages are broken."""

    def check_host(self, recipe: Recipe) -> None:
        """Raise UserError when this host cannot build ``recipe`` faithfully."""

    @staticmethod
    def installed_versions(distributions: list[str]) -> dict[str, str | None]:
        """Installed version of each distribution (None when absent)."""
        versions: dict[str, str | None] = {}
        for dist in distributions:
            try:
                versions[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                versions[dist] = None
        return versions

    @abstractmethod
    def command(self, recipe: Recipe, unit: CompileUnit, cache_root: Path) -> EngineCommand:
        """The process that compiles ``unit`` into the scratch ``cache_root``."""

    @abstractmethod
    def harvest(self, cache_root: Path) -> list[Path]:
        """Files (relative to ``cache_root``) of every complete entry the process wrote.

        Raises RuntimeError when the process left no complete entry.
        """
