"""The demo recipe compiled once for the whole vLLM tier: a compile with the real vLLM CPU build
takes minutes, and every test that needs a compiled demo (and does not test compiling itself)
starts from a copy of the one store (:func:`copied_store`)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from neuronbuild.demo.model import build_demo_model
from tests.lib.builders import RECIPES
from tests.lib.commands import neuronbuild


@dataclass(frozen=True)
class CompiledDemo:
    """The demo model and recipe laid out under ``root`` as in the repository, compiled into the
    folder store ``store``; ``manifest``: the sealed manifest's digest. Read only: copy
    ``store`` before writing to it."""

    root: Path
    recipe: Path
    store: Path
    manifest: str


def lay_out_demo(root: Path) -> Path:
    """The demo recipe beside a demo model, laid out under ``root`` as in the repository; returns
    the recipe's path."""
    build_demo_model(root / "build" / "tiny-llama")
    recipe = root / "recipes" / "cpu-tiny-llama.yaml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(RECIPES / "cpu-tiny-llama.yaml", recipe)
    return recipe


def compile_demo(recipe: Path, store: Path, logs: Path) -> str:
    """``neuronbuild compile`` of ``recipe`` into ``store``; asserts it compiled its one unit and
    returns the sealed manifest's digest."""
    result = neuronbuild(
        "compile", str(recipe), "--cache", str(store), "--log-dir", str(logs), "--json"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    [report] = json.loads(result.stdout)["recipes"]
    assert report["n_units_by_status"]["compiled"] == 1, report
    return str(report["manifest"])


def compiled_demo_in(root: Path) -> CompiledDemo:
    """Lay out and compile the demo under ``root``."""
    recipe = lay_out_demo(root)
    store = root / "store"
    return CompiledDemo(root, recipe, store, compile_demo(recipe, store, root / "logs"))


def copied_store(demo: CompiledDemo, dest: Path) -> Path:
    """A copy of the compiled demo's store at ``dest`` (a few MB), for a test that writes."""
    shutil.copytree(demo.store, dest)
    return dest
