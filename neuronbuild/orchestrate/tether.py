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

Not only the group (issue 20): a process that left it (``setsid``, as compile workers and
vLLM's engine core may) and one whose parent died (re-parented) must end too. So on Linux the
tether is a child subreaper (``PR_SET_CHILD_SUBREAPER``): every orphan below it is re-parented to
it, not to init, and every process the engine started stays its descendant, found by walking
``/proc``'s parent links. It ends its descendants, then its group, on end of file; the engine
gets ``PR_SET_PDEATHSIG`` (SIGKILL) for a tether killed on its own. And when the engine exits,
the tether ends what it left (SIGTERM, then SIGKILL after :data:`GRACE_SECONDS`) before it
exits, still watching the pipe: before, neuronbuild ended the group after the tether had gone,
so a SIGKILL of ``compile`` in those seconds left the helpers running, and setsid'd ones always.

Run as ``python -I tether.py FD ARGV...`` (:func:`tethered` builds that command line).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

HELD_OFF = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Signals the tether outlives (its engine gets them too, as a member of the group); a caught
signal, not an ignored one, so that the engine, after ``exec``, gets the default action back."""

GRACE_SECONDS = 10.0
"""From the first stop signal (or the engine's exit) to SIGKILL of what the engine left: the
scheduler's own grace (``neuronbuild.orchestrate.scheduler.KILL_GRACE_SECONDS``)."""
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
"""``prctl`` options (linux/prctl.h)."""


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


def prctl() -> Callable[[int, int], int] | None:
    """libc's ``prctl(option, value)``, or None where there is none (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        call = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    call.argtypes = [ctypes.c_int, ctypes.c_ulong]
    return call


def descendants() -> list[int]:
    """The live processes below this one (from ``/proc``'s parent links; zombies left out), or
    an empty list where there is no ``/proc``."""
    children: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        if fields[0] != b"Z":
            children.setdefault(int(fields[1]), []).append(int(name))
    found, todo = [], [os.getpid()]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def group_of(pid: int) -> int | None:
    """The process group of ``pid``, or None once it is gone."""
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def signal_all(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def reap_orphans() -> None:
    """Collect re-parented orphans that exited (this process is their subreaper)."""
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def kill_everything() -> None:
    """SIGKILL every descendant (until none is left: one may fork meanwhile), then the group,
    this process included."""
    for _ in range(50):
        left = descendants()
        if not left:
            break
        signal_all(left, signal.SIGKILL)
    os.killpg(0, signal.SIGKILL)


def watch(fd: int) -> None:
    """Block until the pipe on ``fd`` reaches end of file (its writer, neuronbuild, is gone),
    then SIGKILL every process below this one and this process group."""
    while os.read(fd, 1):
        pass  # nothing is ever written; a byte would not mean anything
    kill_everything()


def end_leftovers(deadline: float) -> None:
    """SIGTERM every descendant (what the engine left), then SIGKILL those alive at
    ``deadline`` (``time.monotonic()``)."""
    signal_all(descendants(), signal.SIGTERM)
    while time.monotonic() < deadline:
        reap_orphans()
        if not descendants():
            return
        time.sleep(0.1)
    signal_all(descendants(), signal.SIGKILL)
    reap_orphans()


def main(argv: list[str]) -> int:
    """Run ``argv[1:]`` tethered to the pipe on file descriptor ``argv[0]``; return its exit code
    (a signal that ended it ends the tether the same way)."""
    fd, command = int(argv[0]), argv[1:]
    first_stop: list[float] = []

    def held_off(signum: int, frame: object) -> None:
        # The group got it; what left the group gets it too, and ends by the same deadline.
        first_stop.append(time.monotonic())
        signal_all([p for p in descendants() if group_of(p) != os.getpgrp()], signum)

    for signum in HELD_OFF:
        signal.signal(signum, held_off)
    call = prctl()
    if call is not None:
        call(PR_SET_CHILD_SUBREAPER, 1)
    parent = os.getpid()

    def die_with_the_tether() -> None:  # in the engine, before exec
        if call is not None:
            call(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the tether died before the line above
            os._exit(128 + signal.SIGKILL)

    try:
        engine = subprocess.Popen(command, preexec_fn=die_with_the_tether)
    except OSError as exc:  # as a shell says it: 127 not found, 126 not runnable
        print(f"neuronbuild: cannot run {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    # Started after the fork (no thread in the child); a pipe closed meanwhile reads EOF now.
    threading.Thread(target=watch, args=(fd,), daemon=True).start()
    code = engine.wait()
    start = first_stop[0] if first_stop else time.monotonic()
    end_leftovers(start + GRACE_SECONDS - 1.0)  # before the scheduler's SIGKILL of the group
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
