"""The shape of the code: the store wing keeps its insides, and the import graph has no cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO
from tests.lib.imports import runtime_imports

PRODUCT = [REPO / "neuronbuild", REPO / "runtime", REPO / "bench"]
WING = REPO / "neuronbuild" / "store"
TRANSPORTS = REPO / "neuronbuild" / "transports"


def product_modules() -> Iterator[Path]:
    for folder in PRODUCT:
        yield from sorted(folder.rglob("*.py"))


def test_no_module_outside_the_wing_imports_the_storage_backends() -> None:
    offenders = [
        str(path.relative_to(REPO))
        for path in product_modules()
        if not path.is_relative_to(WING)
        and not path.is_relative_to(TRANSPORTS)
        and any(m.startswith("neuronbuild.transports.backends") for m in runtime_imports(path))
    ]
    assert not offenders


def test_no_module_outside_the_wing_reaches_into_a_stores_backend_or_spells_its_folders() -> None:
    offenders = []
    for path in product_modules():
        if path.is_relative_to(WING) or path.is_relative_to(TRANSPORTS):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("backend", "storage", "_path"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.Constant) and node.value in ("tmp", "locks", "blobs/sha256"):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value!r}")
    assert not offenders


def test_engines_import_neither_the_planner_nor_the_recipe_parser() -> None:
    offenders = {
        str(path.relative_to(REPO)): sorted(
            m
            for m in runtime_imports(path)
            if m.startswith(("neuronbuild.plan", "neuronbuild.recipe"))
        )
        for path in sorted((REPO / "neuronbuild" / "engines").rglob("*.py"))
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_the_wing_imports_nothing_above_it() -> None:
    above = (
        "neuronbuild.plan",
        "neuronbuild.recipe",
        "neuronbuild.engines",
        "neuronbuild.orchestrate.compile",
    )
    offenders = {
        str(path.relative_to(REPO)): sorted(m for m in runtime_imports(path) if m.startswith(above))
        for path in sorted(WING.glob("*.py"))
    }
    assert not {k: v for k, v in offenders.items() if v}


def test_the_demo_is_a_package_run_with_python_dash_m() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "neuronbuild.demo", "--help"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "--recipe" in result.stdout


def test_each_side_of_the_old_cycles_imports_alone() -> None:
    for module in (
        "neuronbuild.engines.compiler",
        "neuronbuild.engines.neuron.engine",
        "neuronbuild.recipe",
        "neuronbuild.keys",
        "neuronbuild.store.records",
    ):
        result = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True
        )
        assert result.returncode == 0, (module, result.stderr[-500:])


def test_every_engine_compiles_for_targets_no_other_claims() -> None:
    from neuronbuild.engines.registry import ENGINES, engine_fields, target_engines

    targets = [t for row in ENGINES.values() for t in row.targets]
    assert len(targets) == len(set(targets)) and sorted(target_engines()) == sorted(targets)
    assert all(row.targets for row in ENGINES.values())
    fields = [f for row in ENGINES.values() for f in row.fields]
    assert len(fields) == len(set(fields)) == len(engine_fields())


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    # pyproject.toml lists the packages by name: a sub-package missing there is left out of
    # every non-editable install (a wheel, an image), though the checkout imports it fine.
    import tomllib

    listed = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = {
        ".".join(init.parent.relative_to(REPO).parts)
        for init in (REPO / "neuronbuild").rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert sorted(found - set(listed)) == []


def test_no_transport_imports_the_store() -> None:
    # A transport knows keys and bytes, never the store's layout (sccache's storage rule).
    offenders = {
        str(path.relative_to(REPO)): sorted(
            m for m in runtime_imports(path) if m.startswith("neuronbuild.store")
        )
        for path in sorted((REPO / "neuronbuild" / "transports").rglob("*.py"))
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_one_module_reads_the_files_a_user_names() -> None:
    # Recipes, policies, keys and store folders' objects are opened by one bounded reader
    # (neuronbuild/user_files.py): no other module opens a file without blocking or composes
    # YAML itself, so a FIFO, a device or a duplicate key is refused alike everywhere.
    found = {
        str(path.relative_to(REPO)): [
            word for word in ("O_NONBLOCK", "SafeLoader(") if word in text
        ]
        for path in sorted(
            [*(REPO / "neuronbuild").rglob("*.py"), *(REPO / "runtime").rglob("*.py")]
        )
        if (text := path.read_text())
    }
    assert {k: v for k, v in found.items() if v} == {
        "neuronbuild/user_files.py": ["O_NONBLOCK", "SafeLoader("]
    }


def test_every_claim_break_still_finds_the_code_it_breaks() -> None:
    # tests/claim_breaks.py breaks the product by text; a break whose text moved away breaks
    # nothing, and its claim goes unguarded without a word.
    from tests.claim_breaks import BREAKS

    stale = [
        (b.name, path)
        for b in BREAKS
        for path, old, _ in b.edits
        if old not in (REPO / path).read_text()
    ]
    assert stale == []
