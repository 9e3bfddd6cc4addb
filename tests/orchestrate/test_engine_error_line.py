"""A failed unit's summary line and ``compile --json`` name the engine's own last error line
from its log (vLLM's ``ValueError: ...`` at the end of its traceback), not only its exit code,
and keep the log's path (issue #20, item 3)."""

from __future__ import annotations

import json
import traceback
from pathlib import Path

from pydantic import ValidationError, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

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


@pydantic_dataclass
class ModelConfig:
    """A pydantic dataclass as vLLM's configs are: one typed field and one model check."""

    max_model_len: int = 1

    @model_validator(mode="after")
    def limit(self) -> ModelConfig:
        if self.max_model_len > 2048:
            raise ValueError(f"User-specified max_model_len ({self.max_model_len}) is too long")
        return self


def pydantic_log(**fields: object) -> str:
    """The log of an engine that died building :class:`ModelConfig` from ``fields``: pydantic's
    own traceback text between two of vLLM's log lines."""
    try:
        ModelConfig(**fields)  # type: ignore[arg-type]
    except ValidationError:
        return f"INFO 12-06 starting\n{traceback.format_exc()}\nINFO 12-06 shutting down\n"
    raise AssertionError("pydantic accepted it")


def test_a_config_validation_error_names_the_field_and_what_is_wrong() -> None:
    """Issue 42: vLLM's refusal reads "1 validation error for ModelConfig" on its header line,
    with the field and the message on the lines after it."""
    said = error_line(pydantic_log(max_model_len="abc")) or ""
    assert said.startswith("pydantic_core._pydantic_core.ValidationError: 1 validation error")
    assert said.endswith(
        "for ModelConfig: max_model_len: Input should be a valid integer, "
        "unable to parse string as an integer"
    )
    said = error_line(pydantic_log(max_model_len=100000)) or ""
    assert said.endswith(
        "for ModelConfig: Value error, User-specified max_model_len (100000) is too long"
    )
