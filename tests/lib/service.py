"""A server process the tests start on loopback (a registry, an S3 API server): its own folder,
its log, its own process group, and a stop that ends all of it and removes its data."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

STOP_SECONDS = 10.0
"""Seconds a server has to end after TERM before it is killed."""


class LoopbackService:
    """A server started by :meth:`spawn` in a fresh folder :attr:`dir` (prefix ``prefix``), its
    output in :attr:`log`."""

    def __init__(self, prefix: str, log_name: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.log = self.dir / log_name
        self.process: subprocess.Popen[bytes] | None = None

    def spawn(self, command: list[str]) -> None:
        """Start ``command`` in its own process group (so :meth:`stop` ends all of it), its
        stdout and stderr into :attr:`log`."""
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def exited(self) -> int | None:
        """The server's exit status, or None while it runs."""
        return None if self.process is None else self.process.poll()

    def tail(self, chars: int = 4000) -> str:
        """The end of the server's log (``chars`` characters at most)."""
        return self.log.read_text(errors="replace")[-chars:] if self.log.exists() else ""

    def stop(self) -> None:
        """End the server's process group (TERM, then KILL after :data:`STOP_SECONDS`) and
        remove its folder."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                try:
                    self.process.wait(STOP_SECONDS)
                except subprocess.TimeoutExpired:
                    os.killpg(self.process.pid, signal.SIGKILL)
                    self.process.wait()
            except ProcessLookupError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
