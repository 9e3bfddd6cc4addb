"""The runtime inference nodes run imports no compile-side module (DESIGN.md, "Repository layout")."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import RECIPES, REPO

COMPILE_SIDE = (
    "neuronbuild.build",
    "neuronbuild.scheduler",
    "neuronbuild.engines.compiler",
    "neuronbuild.engines.cpu_compile",
    "neuronbuild.engines.cpu_compile_worker",
    "neuronbuild.demo",
)

SCRIPT = """
import importlib, json, sys
for name in {modules!r}:
    importlib.import_module(name)
from neuronbuild_runtime.serve import ServeSource, prepare
from neuronbuild.store import Store
try:
    prepare(ServeSource(recipe={recipe!r}), Store({store!r}))
except Exception as exc:
    print("prepare failed as expected:", type(exc).__name__, file=sys.stderr)
print(json.dumps(sorted(m for m in sys.modules if m.startswith("neuronbuild"))))
"""


def test_runtime_imports_no_compile_side_module(tmp_path: Path) -> None:
    runtime_modules = [
        f"neuronbuild_runtime.{m.name}"
        for m in pkgutil.iter_modules([str(REPO / "runtime")])
        if m.name != "__main__"
    ]
    assert "neuronbuild_runtime.serve" in runtime_modules
    script = SCRIPT.format(
        modules=runtime_modules,
        recipe=str(RECIPES / "cpu-tiny-llama.yaml"),
        store=str(tmp_path / "empty-store"),
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    loaded = set(json.loads(result.stdout))
    assert "neuronbuild.store" in loaded and "neuronbuild.plan" in loaded
    assert not loaded & set(COMPILE_SIDE), sorted(loaded & set(COMPILE_SIDE))
