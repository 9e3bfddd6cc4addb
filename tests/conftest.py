"""Fixtures shared by every test folder. The builders (recipes, model folders, a published
build), the commands run in a process of their own and the loopback S3 server live in
``tests/lib/``; their names are also importable from here, where older tests import them."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from neuronbuild import start_env
from tests.lib.builders import (
    NEURON_TOOLCHAIN,
    RECIPES,
    REPO,
    cpu_recipe,
    neuron_recipe,
    overridden,
    publish_build,
    published_with_model,
)
from tests.lib.commands import SERVE_WITHOUT_VLLM, can_unshare_uts, neuronbuild, serve_without_vllm
from tests.lib.demo_build import CompiledDemo, compiled_demo_in
from tests.lib.s3 import moto_s3

__all__ = [
    "NEURON_TOOLCHAIN",
    "RECIPES",
    "REPO",
    "SERVE_WITHOUT_VLLM",
    "can_unshare_uts",
    "cpu_recipe",
    "moto_s3",
    "neuron_recipe",
    "neuronbuild",
    "overridden",
    "publish_build",
    "published_with_model",
    "serve_without_vllm",
]


FAST_CASE_BUDGET = "NEURONBUILD_FAST_CASE_BUDGET"
"""The variable that names the seconds the call of a fast-tier case (marked neither ``slow`` nor
``vllm``) may take; unset, no budget. ``make unit`` sets it, so the fast tier's marker is kept
honest by measurement. Fixture setup is not counted: a module's shared server or model is paid
once, by whichever case comes first."""


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a budget (:data:`FAST_CASE_BUDGET`) that is not a number of seconds, once."""
    budget = os.environ.get(FAST_CASE_BUDGET)
    try:
        if budget is not None and not float(budget) > 0:
            raise ValueError
    except ValueError:
        raise pytest.UsageError(f"${FAST_CASE_BUDGET}={budget!r}: give seconds, e.g. 20") from None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Fail a fast-tier case whose call took longer than the budget (:data:`FAST_CASE_BUDGET`),
    naming the fix."""
    report = yield
    budget = os.environ.get(FAST_CASE_BUDGET)
    slow_tier = any(item.iter_markers("slow")) or any(item.iter_markers("vllm"))
    over = budget and call.when == "call" and call.duration > float(budget)
    if over and report.passed and not slow_tier:
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} took {call.duration:.1f} s, over the fast tier's {budget} s a "
            "case: make it faster, or mark it @pytest.mark.slow (tests/README.md, Tiers)"
        )
    return report


@pytest.fixture(scope="session")
def compiled_demo(tmp_path_factory: pytest.TempPathFactory) -> CompiledDemo:
    """The demo compiled once per pytest process with the real vLLM (tests marked ``vllm``):
    :mod:`tests.lib.demo_build`."""
    return compiled_demo_in(tmp_path_factory.mktemp("compiled-demo"))


@pytest.fixture(autouse=True)
def in_a_folder_of_its_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every test runs in its own temporary folder: a recipe parsed without a file (and every
    command a test starts without ``cwd``) resolves a relative ``model`` there, never in the
    checkout (issue 20)."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store's retry waits, in this process, start at 10 ms instead of 1 s (commands run
    in-process by :func:`tests.lib.commands.neuronbuild` wait so too; a started process keeps the
    real waits). What is retried, how often and what each retry says are unchanged; a test that
    asserts the waits themselves sets its own."""
    from neuronbuild.transports import retry

    monkeypatch.setattr(retry, "BASE_SECONDS", 0.01)


NKI_INTERMEDIATE_VARS = (
    "NEURONBUILD_NKI_INTERMEDIATE_CACHE",
    "NEURON_DOUBLE_NKI_INTERMEDIATE_CACHE",
)
"""Where neuronbuild and the neuron double put NKI kernel binaries (``/var/tmp/...`` on a real
host): one temporary folder per test, so no test writes the real /var/tmp."""


@pytest.fixture(autouse=True)
def nki_intermediate_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """This test's NKI intermediate cache folder (:data:`NKI_INTERMEDIATE_VARS`)."""
    folder = tmp_path_factory.mktemp("nki-intermediate-cache")
    for name in NKI_INTERMEDIATE_VARS:
        monkeypatch.setenv(name, str(folder))
        monkeypatch.setitem(start_env._STARTED_WITH, name, str(folder))
    return folder


@pytest.fixture
def started_with(monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """Set (or, with None, unset) variables of the environment neuronbuild records as the one
    the command was started with (keys and engine environments read it, not ``os.environ``)."""

    def start(**env: str | None) -> None:
        for name, value in env.items():
            if value is None:
                monkeypatch.delitem(start_env._STARTED_WITH, name, raising=False)
            else:
                monkeypatch.setitem(start_env._STARTED_WITH, name, value)

    return start


@pytest.fixture
def write_recipe(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write a recipe mapping (or raw text) to a YAML file and return its path."""
    import yaml

    def write(data: Any, name: str = "recipe.yaml") -> Path:
        path = tmp_path / name
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
        return path

    return write
