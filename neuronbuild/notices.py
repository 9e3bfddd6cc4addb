"""What work below the command line tells a person while it goes on, without printing: a retry
about to be made (a store request, an engine run).

The store, the orchestrate wing and the engines call :func:`retrying`; none of them prints or
imports the terminal layer. The terminal layer (:mod:`neuronbuild.ui.progress`) connects its printer
with :func:`set_retry_listener` when it is imported, as every command line does; a process that
never imports it (a library caller, a Ray worker) drops the notices unless it connects its own.
"""

from __future__ import annotations

from collections.abc import Callable

RetryListener = Callable[[int, int, float, str], None]
"""``listener(attempt, attempts, seconds, reason)``: ``attempt`` is the number of the attempt
about to be made (2: the first retry) of ``attempts`` at most, after a pause of ``seconds``
(0: now); ``reason`` is one line naming what failed and why."""

_listener: RetryListener | None = None


def set_retry_listener(listener: RetryListener | None) -> RetryListener | None:
    """Make ``listener`` receive every retry notice of this process (None: drop them); returns
    the listener it replaces, so that a caller can restore it."""
    global _listener
    previous, _listener = _listener, listener
    return previous


def retry_listener() -> RetryListener | None:
    """The listener this process's retry notices go to now (None: they are dropped), e.g. to
    connect the same printer in a Ray task, whose worker never imports the terminal layer."""
    return _listener


def retrying(attempt: int, attempts: int, seconds: float, reason: str) -> None:
    """Tell whoever listens that attempt ``attempt`` of ``attempts`` follows in ``seconds``
    because of ``reason``. Whether and when to retry is the caller's policy
    (:mod:`neuronbuild.transports.retry` for stores,
    :func:`neuronbuild.orchestrate.compile.run_unit` for engine runs); this only reports it."""
    if _listener is not None:
        _listener(attempt, attempts, seconds, reason)
