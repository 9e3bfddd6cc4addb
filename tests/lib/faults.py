"""Real faults for a command in a process of its own: a file-size limit (``RLIMIT_FSIZE``, which
makes the kernel refuse a write past it with EFBIG: CPython ignores SIGXFSZ), and, where this host
lets a child take a private mount namespace, a small tmpfs (ENOSPC) or a read-only bind (EROFS)."""

from __future__ import annotations

import os
import resource
import shlex
import subprocess
import sys
from pathlib import Path

from tests.lib.commands import SERVE_WITHOUT_VLLM


def command_argv(*args: str) -> list[str]:
    """``neuronbuild ARGS`` (``serve`` stopping short of vLLM's exec, printing its JSON)."""
    if args and args[0] == "serve":
        return [sys.executable, "-c", SERVE_WITHOUT_VLLM, *args[1:]]
    return [sys.executable, "-m", "neuronbuild", *args]


def with_file_size_limit(limit: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``neuronbuild ARGS`` in a child whose every file write past ``limit`` bytes fails."""

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        command_argv(*args), capture_output=True, text=True, preexec_fn=limited, timeout=120
    )


def can_mount() -> bool:
    """Whether a child may mount a tmpfs in a private mount namespace here (root, or a host
    allowing user namespaces); the tests that need it are skipped elsewhere."""
    try:
        out = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "x", "/tmp"],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def in_mounts(
    setup: list[str], *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``neuronbuild ARGS`` in a private mount namespace after the shell commands ``setup``
    (e.g. ``mount -t tmpfs -o size=8k tmpfs DIR``); nothing is mounted outside it."""
    script = " && ".join([*setup, "exec " + shlex.join(command_argv(*args))])
    return subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


def read_only_bind(folder: Path) -> list[str]:
    """The setup lines that make ``folder`` a read-only bind of itself."""
    where = shlex.quote(str(folder))
    return [f"mount --bind {where} {where}", f"mount -o remount,bind,ro {where}"]


def small_tmpfs(folder: Path, size: str) -> list[str]:
    """The setup lines that mount a tmpfs of ``size`` (e.g. ``8k``) on ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    return [f"mount -t tmpfs -o size={size} tmpfs {shlex.quote(str(folder))}"]
