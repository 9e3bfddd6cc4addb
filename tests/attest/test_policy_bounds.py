"""A trust policy is read within bounds, like a recipe: a YAML alias bomb (a few hundred bytes
naming a billion values) and nesting deeper than Python's stack are each refused in one line
(exit 2) within seconds, never expanded, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import neuronbuild


def alias_bomb() -> str:
    """Nine levels of ten aliases each: 10**9 leaves once expanded."""
    lines = ["    l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"    l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]
    return "signers:\n  ci:\n    keys: [ci.pub]\n" + "\n".join(lines) + "\nrefs: *l8\n"


CASES = {
    "alias bomb": (alias_bomb(), "signers.ci: expected exactly {keys: [KEY, ...]}"),
    "nested 5,000 deep": ("refs: " + "[" * 5000 + "]" * 5000 + "\n", "not YAML; fix the file"),
}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.slow
def test_a_hostile_policy_is_refused_in_one_line_within_seconds(tmp_path: Path, case: str) -> None:
    text, expected = CASES[case]
    (tmp_path / "policy.yaml").write_text(text)
    result = neuronbuild(
        "verify", "app/prod", "--policy", str(tmp_path / "policy.yaml"),
        "--cache", str(tmp_path / "store"), timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert expected in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
