"""neuronbuild run as a user runs it: through its CLI edge in this process, or in a process of its
own where the process is the claim (``serve`` stopping short of the exec of vLLM), and whether
this host lets a child take another host name. Every command starts with the suite's planted
secrets in its environment and no output of one may hold them (:mod:`tests.lib.planted`)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.lib import planted


def neuronbuild(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``neuronbuild ARGS`` as a user runs it, its outcome as a finished process: in this process
    through the same CLI edge (:func:`in_process`), unless the process is what the test asserts
    (``process=True``), a ``timeout`` in seconds bounds it (``subprocess.TimeoutExpired`` past
    it), or ``env`` sets ``PYTHONPATH`` (what a started interpreter imports). ``env`` is added to
    ours; ``cwd`` is the folder it runs in."""
    if process or timeout is not None or "PYTHONPATH" in (env or {}):
        return neuronbuild_process(*args, env=env, cwd=cwd, timeout=timeout)
    return in_process(["neuronbuild", *args], env=env, cwd=cwd)


def neuronbuild_process(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``neuronbuild ARGS`` in a process of its own (``env`` added to ours; ``timeout`` in
    seconds, ``subprocess.TimeoutExpired`` past it): for tests whose claim is the process."""
    done = subprocess.run(
        [sys.executable, "-m", "neuronbuild", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=timeout,
    )
    planted.assert_none_in(shlex.join(done.args), done.stdout, done.stderr)
    return done


planted.plant()  # before the snapshot: the suite's commands all start with it, as a node's would

_PROCESS_ENV = dict(os.environ)
"""The test process's environment as it started: what a test changes in it since, a command run
in this process sees as a child would."""


@contextlib.contextmanager
def started_as(env: dict[str, str] | None, cwd: Path | None) -> Iterator[None]:
    """This process made to look started with ``env`` added to its environment (both
    ``os.environ`` and the snapshot :mod:`neuronbuild.start_env` keeps) in ``cwd``, as a child
    process would be; everything put back after. s3fs's cached file systems are dropped on both
    sides, as a new process has none (they keep the endpoint they were made with)."""
    from neuronbuild import start_env

    saved_environ, saved_started = dict(os.environ), dict(start_env._STARTED_WITH)
    saved_cwd = os.getcwd()
    # What the test changed in this process's environment, then ``env``, as a child inherits them;
    # the snapshot keeps what a test set in it directly (the ``started_with`` fixture).
    for name in _PROCESS_ENV.keys() - os.environ.keys():
        start_env._STARTED_WITH.pop(name, None)
    start_env._STARTED_WITH.update(
        {k: v for k, v in os.environ.items() if _PROCESS_ENV.get(k) != v} | (env or {})
    )
    os.environ.update(env or {})
    _forget_s3_clients()
    try:
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_environ)
        start_env._STARTED_WITH.clear()
        start_env._STARTED_WITH.update(saved_started)
        _forget_s3_clients()


def _forget_s3_clients() -> None:
    if "s3fs" in sys.modules:
        sys.modules["s3fs"].S3FileSystem.clear_instance_cache()


def in_process(
    argv: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    exec_vllm: Callable[[Any], None] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``argv`` (``neuronbuild ...`` or ``serve ...``) run in this process through the same CLI
    edge a user's process runs (:func:`neuronbuild.ui.console.run`), with ``env`` and ``cwd`` as
    :func:`started_as` sets them: its exit code, stdout and stderr as a finished process.

    As in a fresh process, the command starts at normal verbosity with the CLI's retry listener,
    and what it changes of either is put back after, as are the signal handlers the edge
    installs. An exception the edge lets through is what the interpreter would print: a
    traceback, exit 1. A ``serve`` that reaches the exec of vLLM calls ``exec_vllm`` (by default
    it fails the test: vLLM never replaces the test process), and an exit the edge would take
    without unwinding (after a stop signal) is a ``SystemExit`` here."""
    import neuronbuild_runtime.cli as runtime_cli
    from neuronbuild import notices
    from neuronbuild.ui import console, verbosity
    from neuronbuild.ui.console import run

    command: Any = runtime_cli.serve if argv[0] == "serve" else _group()
    out, err = io.StringIO(), io.StringIO()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    saved = (verbosity.verbosity(), notices.retry_listener(), sys.argv[0])
    saved_exec, saved_exit = runtime_cli.exec_vllm, console._exit_now
    runtime_cli.exec_vllm = exec_vllm or _refuse_exec
    console._exit_now = _exit_by_raising
    verbosity.set_verbosity(verbosity.NORMAL)
    sys.argv[0] = "neuronbuild"  # click names the program after it in usage lines
    code = 0
    try:
        with started_as(env, cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                run(command, argv[1:])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            except Exception:
                traceback.print_exc()
                code = 1
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
        verbosity.set_verbosity(saved[0])
        notices.set_retry_listener(saved[1])
        sys.argv[0] = saved[2]
        runtime_cli.exec_vllm, console._exit_now = saved_exec, saved_exit
    planted.assert_none_in(shlex.join(argv), out.getvalue(), err.getvalue())
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def _group() -> Any:
    from neuronbuild.cli.main import cli

    return cli


def _refuse_exec(prepared: Any) -> None:
    raise AssertionError(
        "serve reached the exec of vLLM in the test process: use serve_without_vllm, --dry-run, "
        "or process=True"
    )


def _exit_by_raising(code: int) -> None:
    raise SystemExit(code)


SERVE_WITHOUT_VLLM = """
import json, sys
import neuronbuild_runtime.cli as cli
from neuronbuild.ui.console import run
cli.exec_vllm = lambda prepared: print(json.dumps(prepared.to_json()))
sys.argv = ["serve", *sys.argv[1:]]
run(cli.serve)
"""


def serve_without_vllm(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, process: bool = False
) -> subprocess.CompletedProcess[str]:
    """``neuronbuild serve ARGS`` exactly as a node runs it, but printing the prepared vLLM
    command as JSON instead of exec'ing vLLM (everything up to the exec happens for real): in
    this process (:func:`in_process`), or with ``process=True`` or a ``PYTHONPATH`` in ``env``
    in a process of its own."""
    if process or "PYTHONPATH" in (env or {}):
        done = subprocess.run(
            [sys.executable, "-c", SERVE_WITHOUT_VLLM, *args],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
        planted.assert_none_in(shlex.join(["serve", *args]), done.stdout, done.stderr)
        return done

    def print_prepared(prepared: Any) -> None:
        print(json.dumps(prepared.to_json()))

    return in_process(["serve", *args], env=env, cwd=cwd, exec_vllm=print_prepared)


def can_unshare_uts() -> bool:
    """Whether ``unshare --uts`` may give a child another host name here (containers often
    forbid it); the tests that use it say so when they fall back to in-process checks."""
    try:
        out = subprocess.run(
            ["unshare", "--uts", "sh", "-c", "hostname elsewhere && hostname"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0 and out.stdout.strip() == "elsewhere" != socket.gethostname()


def neuronbuild_in_process(*args: str) -> tuple[int, str, str]:
    """``neuronbuild ARGS`` in this process (:func:`in_process`): (exit code, stdout, stderr)."""
    done = in_process(["neuronbuild", *args])
    return done.returncode, done.stdout, done.stderr
