"""A failed unit's summary line and ``compile --json`` name the engine's own last error line
from its log (vLLM's ``ValueError: ...`` at the end of its traceback), not only its exit code,
and keep the log's path (issue #20, item 3)."""

from __future__ import annotations

import json
from pathlib import Path

from neuronbuild.engines.compiler import error_line
from tests.orchestrate.test_shards import double_env, double_recipe, neuronbuild, write_recipes

DOUBLE_ERROR = "RuntimeError: cpu double: told to fail this build"
"""The line the CPU test double's ``LLM`` ends its traceback with (``CPU_DOUBLE_FAIL_SEQS``)."""


def failed_compile(tmp_path: Path, *flags: str) -> tuple[int, str, str]:
    (bad,) = write_recipes(tmp_path / "recipes", [double_recipe("bad", max_num_seqs=8)])
    env = double_env(tmp_path, CPU_DOUBLE_FAIL_SEQS="8")
    store = str(tmp_path / "store")
    done = neuronbuild("compile", bad, "--cache", store, *flags, env=env)
    return done.returncode, done.stdout, done.stderr


def test_the_summary_line_names_the_engines_last_error_line(tmp_path: Path) -> None:
    code, _, err = failed_compile(tmp_path)
    assert code == 1, err
    failed = [line for line in err.splitlines() if "FAILED" in line]
    assert failed and DOUBLE_ERROR in failed[0], err
    assert "engine exited with 1" in err and ".log" in err  # the exit code and log path stay


def test_json_gives_each_failed_unit_the_engines_error_line(tmp_path: Path) -> None:
    code, out, err = failed_compile(tmp_path, "--json")
    assert code == 1, err
    units = [u for r in json.loads(out)["recipes"] for u in r["units"]]
    (unit,) = [u for u in units if u["status"] == "failed"]
    assert unit["engine_error"] == DOUBLE_ERROR
    assert Path(unit["log"]).is_file() and DOUBLE_ERROR in Path(unit["log"]).read_text()


def test_the_error_line_is_the_last_that_looks_like_an_error_else_the_last_line() -> None:
    log = (
        "INFO loading\nValueError: first\nTraceback (most recent call last):\n"
        "  File x\nValueError: max_model_len 9999 is too long\nINFO shutting down\n\n"
    )
    assert error_line(log) == "ValueError: max_model_len 9999 is too long"
    log = "ERROR 12-02 the compiler gave up\nbye\n"
    assert error_line(log) == "ERROR 12-02 the compiler gave up"
    log = "2026-12-02 neuronx-cc error: NCC_INLA001 bad shape\n"
    assert error_line(log) == "2026-12-02 neuronx-cc error: NCC_INLA001 bad shape"
    log = "starting\nlast words\n\n"
    assert error_line(log) == "last words"
    log = "RuntimeError: " + "x" * 1000 + "\n"
    assert len(error_line(log) or "") == 300
    assert error_line("\n\n") is None
