"""The runtime inference nodes run imports no compile-side module (DESIGN.md, "Repository layout")."""

from __future__ import annotations

import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from neuronbuild.store.cas import Store
from tests.conftest import REPO, cpu_recipe, publish_build

COMPILE_SIDE = (
    "neuronbuild.orchestrate.compile",
    "neuronbuild.orchestrate.scheduler",
    "neuronbuild.engines.compiler",
    "neuronbuild.engines.vllm_cpu.compile",
    "neuronbuild.engines.vllm_cpu.compile_worker",
    "neuronbuild.demo",
)

SCRIPT = """
import importlib, json, sys
from pathlib import Path
for name in {modules!r}:
    importlib.import_module(name)
from neuronbuild_runtime.serve import ServeSource, prepare
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
prepared = prepare(
    ServeSource(recipe={recipe!r}),
    TieredStore(Store({local!r}, create=True), Store({store!r})),
    cache_root=Path({root!r}),
)
assert prepared.files == 2, prepared
print(json.dumps(sorted(m for m in sys.modules if m.startswith("neuronbuild"))))
"""


def test_runtime_imports_no_compile_side_module(tmp_path: Path, write_recipe: Any) -> None:
    runtime_modules = [
        f"neuronbuild_runtime.{m.name}"
        for m in pkgutil.iter_modules([str(REPO / "runtime")])
        if m.name != "__main__"
    ]
    assert "neuronbuild_runtime.serve" in runtime_modules
    # A published build for the runtime to resolve, fetch, verify and lay out.
    data = cpu_recipe(cpu_isa="host", model="./model")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    recipe = write_recipe(data)
    publish_build(
        Store(str(tmp_path / "store"), create=True), data, tmp_path, "a", source=str(recipe)
    )
    script = SCRIPT.format(
        modules=runtime_modules,
        recipe=str(recipe),
        store=str(tmp_path / "store"),
        local=str(tmp_path / "node"),
        root=str(tmp_path / "root"),
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    loaded = set(json.loads(result.stdout))
    assert "neuronbuild.store.tiered" in loaded and "neuronbuild.plan" in loaded
    assert not loaded & set(COMPILE_SIDE), sorted(loaded & set(COMPILE_SIDE))
