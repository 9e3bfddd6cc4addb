"""neuronbuild run as a user runs it: in a process of its own (``serve`` stopping short of the
exec of vLLM), and whether this host lets a child take another host name."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def neuronbuild(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """``neuronbuild ARGS`` in a process of its own, as a user runs it (``env`` added to ours;
    ``timeout`` in seconds, ``subprocess.TimeoutExpired`` past it)."""
    return subprocess.run(
        [sys.executable, "-m", "neuronbuild", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=timeout,
    )


SERVE_WITHOUT_VLLM = """
import json, sys
import neuronbuild_runtime.cli as cli
from neuronbuild.ui.console import run
cli.exec_vllm = lambda prepared: print(json.dumps(prepared.to_json()))
sys.argv = ["serve", *sys.argv[1:]]
run(cli.serve)
"""


def serve_without_vllm(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``neuronbuild serve ARGS`` exactly as a node runs it, but printing the prepared vLLM
    command as JSON instead of exec'ing vLLM (everything up to the exec happens for real)."""
    return subprocess.run(
        [sys.executable, "-c", SERVE_WITHOUT_VLLM, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


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
    """``neuronbuild ARGS`` in this process, through the same CLI edge a user's process runs
    (:func:`neuronbuild.ui.console.run`), faster than :func:`neuronbuild`: (exit code, stdout,
    stderr). The signal handlers the edge installs are restored."""
    import contextlib
    import io
    import signal

    from neuronbuild.cli.main import cli
    from neuronbuild.ui.console import run

    out, err = io.StringIO(), io.StringIO()
    handler = signal.getsignal(signal.SIGTERM)
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run(cli, list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        signal.signal(signal.SIGTERM, handler)
    return code, out.getvalue(), err.getvalue()
