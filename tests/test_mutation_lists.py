"""The mutation settings name only what exists: every path in ``[tool.mutmut]`` and every module
in the Makefile's ``MUTATION_MODULES`` (a moved module or test file otherwise drops out of
``make mutation`` without a word)."""

from __future__ import annotations

import re

import pytest

from tests.lib.builders import REPO

tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python 3.11+")


def mutmut() -> dict[str, list[str]]:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["mutmut"]  # type: ignore[no-any-return]


def test_every_path_mutmut_mutates_copies_or_selects_exists() -> None:
    config = mutmut()
    paths = [*config["source_paths"], *config["only_mutate"], *config["also_copy"]]
    paths += [a for a in config["pytest_add_cli_args_test_selection"] if a.startswith("tests/")]
    missing = [p for p in paths if not list(REPO.glob(p.rstrip("/")))]
    assert not missing, f"[tool.mutmut] names paths that do not exist: {missing}"


def test_every_mutation_module_of_the_makefile_exists_and_is_mutated() -> None:
    makefile = (REPO / "Makefile").read_text()
    found = re.search(r"^MUTATION_MODULES \?=((?:.*\\\n)*.*)$", makefile, re.M)
    assert found, "no MUTATION_MODULES in the Makefile"
    modules = found.group(1).replace("\\\n", " ").split()
    patterns = mutmut()["only_mutate"]
    for module in modules:
        path = module.replace(".", "/")
        file = f"{path}.py" if (REPO / f"{path}.py").is_file() else f"{path}/__init__.py"
        assert (REPO / file).is_file(), f"MUTATION_MODULES names {module}, which does not exist"
        assert any(REPO.joinpath(file).match(str(REPO / p)) for p in patterns), (
            f"MUTATION_MODULES names {module}, which [tool.mutmut] only_mutate leaves out"
        )
