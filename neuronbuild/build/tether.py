"""The leader of one engine run's process group: it runs the engine and ends the whole group the
moment the neuronbuild process that started it is gone, however it went (SIGKILL included).

Why: each engine run has a session of its own, so that a unit's timeout or a cancel can end
everything it started (vLLM's helper processes, the Neuron compiler's), out of reach of
signals sent to neuronbuild's own process group. Without a tether, killing ``compile`` (or its
whole group) left the engine and its compilers running, holding their memory (issue 19).

How: neuronbuild keeps the write end of a pipe open for as long as the run lasts and never
writes to it; this process, the group's leader, reads the other end on a thread. The kernel
closes the write end when neuronbuild exits, however it exits, and the read returns end of file:
the tether then sends SIGKILL to its own process group, which holds the engine and every process
the engine started that did not leave the group (``setsid``). A pipe, not Linux's
``PR_SET_PDEATHSIG``: that signal follows the death of the *thread* that forked (neuronbuild
starts engines from worker threads, Ray from its task threads), reaches only the direct child,
and needs a second check for a parent that died before it was set; end of file has no race and
works on any POSIX host. It holds on a Ray worker too: the task's process holds the pipe.

The tether waits for the engine and exits as it did (the same code, or the same signal, so
``Popen`` sees ``-9`` for an engine the kernel killed for memory); the stop signals the
scheduler sends the group (SIGTERM, then SIGKILL) reach the engine, and the tether outlives
them until the engine has gone. It imports only the standard library and runs isolated
(``python -I``), whatever the engine's environment holds.

Run as ``python -I tether.py FD ARGV...`` (:func:`tethered` builds that command line).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence

HELD_OFF = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals the tether outlives (its engine gets them too, as a member of the group); a caught
signal, not an ignored one, so that the engine, after ``exec``, gets the default action back."""


@contextlib.contextmanager
def tethered(argv: Sequence[str]) -> Iterator[tuple[list[str], int]]:
    """While active, ``argv`` wrapped in a tether: yields the command line to start (in a
    session of its own) and the file descriptor to pass to it (``Popen(pass_fds=...)``). Leaving
    the block closes the pipe; the run must be over by then (its group ended)."""
    read_end, write_end = os.pipe()  # both non-inheritable: no other child holds them
    try:
        yield [sys.executable, "-I", os.path.abspath(__file__), str(read_end), *argv], read_end
    finally:
        os.close(read_end)
        os.close(write_end)


def watch(fd: int) -> None:
    """Block until the pipe on ``fd`` reaches end of file (its writer, neuronbuild, is gone),
    then SIGKILL this process group: the tether, the engine and what the engine started."""
    while os.read(fd, 1):
        pass  # nothing is ever written; a byte would not mean anything
    os.killpg(0, signal.SIGKILL)


def main(argv: list[str]) -> int:
    """Run ``argv[1:]`` tethered to the pipe on file descriptor ``argv[0]``; return its exit code
    (a signal that ended it ends the tether the same way)."""
    fd, command = int(argv[0]), argv[1:]
    for signum in HELD_OFF:
        signal.signal(signum, lambda signum, frame: None)
    threading.Thread(target=watch, args=(fd,), daemon=True).start()
    try:
        engine = subprocess.Popen(command)  # stdio, environment and folder: the tether's own
    except OSError as exc:  # as a shell says it: 127 not found, 126 not runnable
        print(f"neuronbuild: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    code = engine.wait()
    if code < 0:
        with contextlib.suppress(OSError, ValueError):  # SIGKILL has no handler to reset
            signal.signal(-code, signal.SIG_DFL)
        with contextlib.suppress(OSError, ValueError):  # the engine's core is the one to keep
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.kill(os.getpid(), -code)
        return 128 - code  # a signal whose default is not to end a process
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
