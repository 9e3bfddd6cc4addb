"""The test double's ledger (``tests/neuron_double/CONFORMANCE.md``) cannot rot: every double
function and every test a row names exists, and the double never imports neuronbuild (so it
cannot share the product's assumptions: issue 18 item 9)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.neuron_double import SITE

LEDGER = REPO / "tests" / "neuron_double" / "CONFORMANCE.md"
ROW = re.compile(r"^\| (L\d+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$")
FIDELITY_ROW = re.compile(r"^([A-E]\d+|—|§\d.*)$")


def rows() -> list[tuple[str, str, list[str], list[str]]]:
    """``(id, fidelity rows, double references, test references)`` of each table row."""
    out = []
    for line in LEDGER.read_text().splitlines():
        found = ROW.match(line)
        if found:
            ident, fidelity, _, double, tests = (g.strip() for g in found.groups())
            out.append(
                (ident, fidelity, re.findall(r"`([^`]+)`", double), re.findall(r"`([^`]+)`", tests))
            )
    return out


def defined(path: Path) -> set[str]:
    """Top-level functions and classes of ``path``, and ``Class.method`` for their methods."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names |= {
                f"{node.name}.{item.name}"
                for item in node.body
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return names


def missing_double(reference: str) -> str | None:
    """Why ``file:function`` (or a plain file) under the double's ``site/`` does not resolve."""
    file, _, function = reference.partition(":")
    path = SITE / file
    if not path.is_file():
        return f"{reference}: no file {path}"
    if function and function not in defined(path):
        return f"{reference}: no {function} in {file}"
    return None


def missing_test(reference: str) -> str | None:
    """Why ``tests/<file>.py::name`` does not name a test function."""
    file, _, name = reference.partition("::")
    path = REPO / file
    if not path.is_file() or not name.startswith("test_"):
        return f"{reference}: not a tests/<file>.py::test_<name> reference"
    return None if name in defined(path) else f"{reference}: no {name} in {file}"


def test_the_ledger_has_rows_with_unique_ids_a_double_and_a_test_each() -> None:
    table = rows()
    assert len(table) >= 25
    assert len({ident for ident, *_ in table}) == len(table)
    for ident, fidelity, double, tests in table:
        assert double and tests, ident
        for row in (r.strip() for r in fidelity.split(",")):
            assert FIDELITY_ROW.match(row), f"{ident}: {row!r} is not a fidelity row id"


def test_every_double_function_the_ledger_names_exists() -> None:
    problems = [p for *_, double, _ in rows() for p in map(missing_double, double) if p]
    assert problems == []


def test_every_test_the_ledger_names_exists() -> None:
    problems = [p for *_, tests in rows() for p in map(missing_test, tests) if p]
    assert problems == []


@pytest.mark.parametrize(
    ("reference", "resolves"),
    [
        ("vllm_neuron/platform.py:plan", True),
        ("vllm_neuron/platform.py:NeuronPlatform.build_engine", True),
        ("vllm_neuron/platform.py:no_such_rule", False),
        ("vllm_neuron/nowhere.py:plan", False),
    ],
)
def test_a_double_reference_resolves_only_when_it_exists(reference: str, resolves: bool) -> None:
    assert (missing_double(reference) is None) is resolves


@pytest.mark.parametrize(
    ("reference", "resolves"),
    [
        ("tests/engines/test_conformance_ledger.py::test_every_test_the_ledger_names_exists", True),
        ("tests/engines/test_conformance_ledger.py::test_gone", False),
        ("tests/engines/test_conformance_ledger.py::rows", False),
    ],
)
def test_a_test_reference_resolves_only_when_it_exists(reference: str, resolves: bool) -> None:
    assert (missing_test(reference) is None) is resolves


FORBIDDEN = ("neuronbuild", "neuronbuild_runtime", "tests")
"""Top-level packages the double must never import: the product and its test helpers."""


def imports_of(path: Path) -> set[str]:
    """The top-level package of every ``import`` / ``from ... import`` in ``path``, and of every
    literal ``importlib.import_module("...")`` / ``__import__("...")`` argument."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = ast.unparse(node.func)
            if func in ("importlib.import_module", "import_module", "__import__"):
                found.add(str(node.args[0].value).split(".")[0])
    return found


def test_the_double_never_imports_neuronbuild() -> None:
    files = sorted((REPO / "tests" / "neuron_double").rglob("*.py"))
    assert len(files) >= 5
    bad = {str(f.relative_to(REPO)): sorted(imports_of(f) & set(FORBIDDEN)) for f in files}
    assert {f: names for f, names in bad.items() if names} == {}
    # Nor does a text file of it point into the product's modules (an entry point, a RECORD).
    texts = [f for f in SITE.rglob("*") if f.is_file() and f.suffix not in (".py", ".pyc")]
    assert [str(f) for f in texts if re.search(r"neuronbuild\w*[.:/]", f.read_text())] == []


def test_the_import_audit_sees_each_spelling(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import neuronbuild.plan\nfrom neuronbuild_runtime import serve\n"
        "import importlib\nimportlib.import_module('tests.lib')\nfrom . import sibling\n"
    )
    assert imports_of(source) == {"neuronbuild", "neuronbuild_runtime", "importlib", "tests"}
