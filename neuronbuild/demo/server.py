"""vLLM as a child process: start it in its own process group, wait until its OpenAI-compatible
server answers, ask it for a greedy completion, end the whole group. Used by the ``make run``
demo, the end-to-end tests and the benchmarks."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from neuronbuild.ui.logtail import tail_lines

if TYPE_CHECKING:
    from typing import Self

READY_TIMEOUT = 600.0
"""Seconds to wait for a server to answer ``/v1/models`` (a cold CPU start takes about a minute)."""


def free_port() -> int:
    """An unused TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Child:
    """A child process (``argv``, run in ``cwd`` with ``env``) in its own process group, its
    output in ``log``.

    Use as a context manager: entering starts it, leaving ends the whole process group (vLLM
    starts helper processes).
    """

    def __init__(
        self,
        argv: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.argv, self.log, self.env, self.cwd = argv, log, env, cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.started = 0.0

    def __enter__(self) -> Self:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def tail(self, lines: int = 30) -> str:
        """The last ``lines`` lines of the child's log, one string (empty when unreadable), for
        an error message (:func:`~neuronbuild.ui.logtail.tail_lines`)."""
        return "\n".join(tail_lines(self.log, lines))

    def stop(self) -> None:
        """End the process group: SIGTERM, then SIGKILL after 20 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = self.proc.pid
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait()
        # vLLM's helpers may outlive the parent briefly.
        for _ in range(50):
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        os.killpg(pgid, signal.SIGKILL)


class Server(Child):
    """A vLLM OpenAI-compatible server process (``argv``) listening on ``port``.

    Use as a context manager: entering starts it, :meth:`wait_ready` blocks until it answers,
    leaving ends the whole process group.
    """

    def __init__(
        self, argv: list[str], port: int, log: Path, env: dict[str, str] | None = None
    ) -> None:
        super().__init__(argv, log, env)
        self.port = port

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> float:
        """Seconds from start until ``/v1/models`` answers.

        Raises:
            RuntimeError: the server exited first, or did not answer within ``timeout`` seconds
                (the log's last lines are in the message).
        """
        assert self.proc is not None
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.url("/v1/models"), timeout=2):
                    return time.monotonic() - self.started
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
        raise RuntimeError(f"server not ready after {timeout:.0f} s:\n{self.tail()}")

    def complete(self, prompt: str, max_tokens: int = 16) -> str:
        """The greedy completion (temperature 0) of ``prompt``."""
        body = json.dumps(
            {"model": self.model(), "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
        ).encode()
        request = urllib.request.Request(
            self.url("/v1/completions"), body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return str(json.load(response)["choices"][0]["text"])

    def model(self) -> str:
        with urllib.request.urlopen(self.url("/v1/models"), timeout=10) as response:
            return str(json.load(response)["data"][0]["id"])
