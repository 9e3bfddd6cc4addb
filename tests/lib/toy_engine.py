"""A third engine that lives only in the tests: one module and one registry row, with a target
(``toy``) and a recipe key (``toy_chip``) of its own, to show that an engine needs nothing more
(issue 40: "a third engine ... is one folder or module plus one table row"). It plans and names
its node image's machine; it cannot compile (the base engine's refusal)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, ClassVar

import pytest

from neuronbuild import envs
from neuronbuild.engines import registry
from neuronbuild.engines.base import Engine, UnitSpec
from neuronbuild.errors import MISSING, RecipeError
from neuronbuild.graph import Graph

if TYPE_CHECKING:
    from neuronbuild.recipe import Recipe

ROW = registry.EngineRow(f"{__name__}:ToyEngine", "pip install toy-engine", ("toy",), ("toy_chip",))
"""The toy engine's row, as a third shipped engine would add it to ``registry.ENGINES``."""

CHIPS = ("t1", "t2")


class ToyEngine(Engine):
    """Compiles for target ``toy``; each recipe names its ``toy_chip``, which keys its one unit
    and picks its node image's machine."""

    name: ClassVar[str] = "toy"
    factor_meanings: ClassVar[Mapping[str, str]] = {"toy_chip": "another toy chip"}

    def validate(self, recipe: Recipe) -> tuple[list[RecipeError], list[str]]:
        errors, warnings = super().validate(recipe)
        chip = recipe.fields.get("toy_chip")
        if chip not in CHIPS:
            hint = f"must be one of {', '.join(CHIPS)}"
            errors.append(RecipeError("toy_chip", MISSING if chip is None else chip, hint))
        return errors, warnings

    def units(self, recipe: Recipe) -> list[UnitSpec]:
        return [UnitSpec((Graph.dynamic(),), {"toy_chip": recipe.fields["toy_chip"]})]

    def serve_env(self, cache_root: str, toolchain: Mapping[str, str]) -> dict[str, str]:
        return {envs.VLLM_CACHE_ROOT: cache_root}

    def image_architecture(self, factors: Mapping[str, Any]) -> str:
        if factors.get("toy_chip") not in CHIPS:
            raise ValueError(f"unknown toy_chip {str(factors.get('toy_chip'))[:60]!a}")
        return "riscv64"

    def node_differences(self, factors: dict[str, Any]) -> list[tuple[str, str, str]]:
        return [("toy_chip", str(factors.get("toy_chip")), "no toy chip")]


def toy_recipe(**args: Any) -> dict[str, Any]:
    """A valid toy recipe; a key set to ``None`` is removed."""
    from tests.lib.builders import overridden

    data = {
        "name": "toy",
        "target": "toy",
        "toy_chip": "t2",
        "model": "build/tiny-llama",
        "max_model_len": 256,
        "max_num_seqs": 4,
    }
    return overridden(data, args)


@contextmanager
def registered() -> Iterator[None]:
    """The toy engine's row in the registry for the block, then the registry as it was."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(registry.ENGINES, "toy", ROW)
        yield
