"""Retries against a store: which faults are retried and how long to wait; each retry is said on
stderr by :func:`neuronbuild.ui.progress.retrying` (``retrying (2/5) in 4 s: <reason>``) instead of
a client's silent retries (12 to 18 s of silence with botocore's own, against an endpoint
answering 500).

On S3 the decision is taken here, per request: botocore's retry handler is left a single attempt
(:data:`S3_RETRIES`) and :func:`watch_s3` puts :func:`needs_retry` first on the client's
``needs-retry`` event, so a multipart upload retries the part that failed, not the whole file.
What is retried is what botocore's standard retry mode retries (its ``TransientRetryableChecker``
and ``ThrottledRetryableChecker``, botocore/retries/standard.py): HTTP 500, 502, 503, 504 and 429,
throttling and request-timeout error codes, and connection or read faults. s3fs's own retry loop
around each request (``S3FileSystem.retries``, five attempts, silent) is turned off, so a fault is
never tried 5 x 5 times; what only that loop saw, a response body that breaks or stalls while it
is read (after botocore returned), is retried by :func:`body_retried`, and reported too. The ref's
compare-and-swap and a blob upload whose stored size differs retry in
:mod:`neuronbuild.store.cas` and report the same way. Blob GETs through obstore
(:mod:`neuronbuild.transports.s3_fast`) retry the same faults, read from obstore's errors, with
obstore's own retries off, and report the same way.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from neuronbuild.errors import StoreError
from neuronbuild.notices import retrying

T = TypeVar("T")

ATTEMPTS = 5
"""Attempts of one S3 request, the first included (botocore's standard mode also makes 5)."""

BASE_SECONDS = 1.0
"""The wait before the first retry; it doubles for each further one."""

MAX_SECONDS = 20.0
"""The longest wait between two attempts (botocore's standard mode caps at 20 s too)."""

MAX_RETRY_AFTER = 60.0
"""The longest ``Retry-After`` honoured (seconds): a server that asks for a longer wait is given up
on at once, naming what it asked; so one request waits at most :data:`ATTEMPTS` - 1 times this."""

S3_RETRIES = {"total_max_attempts": 1, "mode": "standard"}
"""botocore's own retries: none; :func:`needs_retry` decides."""

TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})
TRANSIENT_CODES = frozenset(
    {
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "LimitExceededException",
        "RequestThrottled",
        "SlowDown",
    }
)
"""S3 error codes retried whatever their HTTP status (botocore's standard mode's lists)."""


class Abandoned(StoreError):
    """The read a retry served was dropped by its reader (a ranged read closed after another part
    failed): no further attempt is made, so a failed pull exits without waiting out the others'
    retries."""


_DROPPED: ContextVar[threading.Event | None] = ContextVar("dropped", default=None)
"""Set while a request runs for a reader that may drop it (:func:`run_droppable`)."""


def run_droppable(dropped: threading.Event, request: Callable[[], T]) -> T:
    """``request()``, whose retry waits (:func:`pause`) end with :class:`Abandoned` as soon as
    ``dropped`` is set."""
    token = _DROPPED.set(dropped)
    try:
        return request()
    finally:
        _DROPPED.reset(token)


def pause(seconds: float) -> None:
    """Wait ``seconds`` before a retry.

    Raises:
        Abandoned: the reader this request serves dropped it, before or during the wait.
    """
    dropped = _DROPPED.get()
    if dropped is None:
        time.sleep(seconds)
    elif dropped.wait(seconds):
        raise Abandoned("the read was dropped by its reader")


def backoff(attempt: int) -> float:
    """Seconds to wait before ``attempt`` (2: the first retry): :data:`BASE_SECONDS` doubled
    for each retry, capped at :data:`MAX_SECONDS`, between half and all of it at random so that
    builders hit by one outage do not retry in step."""
    return min(MAX_SECONDS, BASE_SECONDS * 2.0 ** (attempt - 2)) * random.uniform(0.5, 1.0)


def retry_after(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` header asks a client to wait: delta-seconds or an HTTP-date
    (RFC 9110, section 10.2.3), never negative; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():  # "²".isdigit() is true too
        return float(text)
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time()) if when.tzinfo else None


def wait_for(attempt: int, asked: float | None) -> float:
    """Seconds to wait before ``attempt``: :func:`backoff`, or the server's ``Retry-After``
    (``asked``, seconds) when it asks for longer.

    Raises:
        ValueError: ``asked`` is over :data:`MAX_RETRY_AFTER` (the caller gives up, saying so).
    """
    why = too_long(asked)
    if why is not None:
        raise ValueError(why)
    return max(backoff(attempt), asked or 0.0)


def too_long(asked: float | None) -> str | None:
    """Why a server's ``Retry-After`` of ``asked`` seconds is not waited for (over
    :data:`MAX_RETRY_AFTER`), or None when it is."""
    if asked is None or asked <= MAX_RETRY_AFTER:
        return None
    return (
        f"asked to retry after {asked:.0f} s, over the {MAX_RETRY_AFTER:.0f} s neuronbuild "
        "waits; try again later"
    )


def s3_fault(response: Any, caught_exception: BaseException | None) -> str | None:
    """Why an S3 request's outcome is worth another attempt, or None when it is not (success,
    a missing object, a refused precondition, bad credentials: retrying cannot help).

    ``response``: botocore's ``(http_response, parsed)``; ``caught_exception``: what the
    request raised instead.
    """
    if caught_exception is not None:
        from botocore.exceptions import ConnectionError, HTTPClientError

        if isinstance(caught_exception, ConnectionError | HTTPClientError):
            return one_line(str(caught_exception) or type(caught_exception).__name__)
        return None
    if response is None:
        return None
    http, parsed = response
    status = int(getattr(http, "status_code", 0) or 0)
    error = parsed.get("Error", {}) if isinstance(parsed, dict) else {}
    code = str(error.get("Code") or "")
    if status not in TRANSIENT_STATUS and code not in TRANSIENT_CODES:
        return None
    message = str(error.get("Message") or "")
    code = "" if code == str(status) else code  # a HEAD's error has no body, only its status
    parts = (f"HTTP {status}", code, message and f"({message})")
    return one_line(" ".join(part for part in parts if part))


def one_line(text: str, limit: int = 200) -> str:
    """``text`` on one line (aiohttp's messages span several), cut to ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def needs_retry(
    attempts: int,
    operation: Any = None,
    response: Any = None,
    caught_exception: BaseException | None = None,
    **_: Any,
) -> float | bool:
    """botocore's ``needs-retry`` handler: the seconds to wait before the next attempt (after
    reporting it), or False to stop retrying. ``attempts``: those made so far."""
    fault = s3_fault(response, caught_exception)
    if fault is None or attempts >= ATTEMPTS:
        return False
    headers = getattr(response[0], "headers", None) or {} if response else {}
    asked = retry_after(headers.get("Retry-After") or headers.get("retry-after"))
    try:
        seconds = wait_for(attempts + 1, asked)
    except ValueError:
        return False  # botocore raises the throttling error as it is: exit 3, one line
    name = getattr(operation, "name", None)
    why = f"{name}: {fault}" if name else fault
    retrying(attempts + 1, ATTEMPTS, seconds, f"{why} (Retry-After: {asked:g} s)" if asked else why)
    return seconds


def body_faults() -> tuple[type[BaseException], ...]:
    """The faults of a response body read after botocore returned it, which botocore's
    ``needs-retry`` never sees: a stalled read (aiobotocore's ``AioReadTimeoutError``, not the
    plain ``ReadTimeoutError`` of a request, which :func:`needs_retry` already retried), a
    connection cut mid-body, a short body (the ones s3fs's own loop retried, s3fs/core.py), and
    a body whose bytes fail the checksum S3 sent with them (``FlexibleChecksumError``, raised by
    botocore's ``StreamingChecksumBody`` at the end of the body since botocore 1.36 validates
    GetObject's checksum by default): S3 computed it over the bytes it holds, so a mismatch is
    bytes changed in transit, and another read may get them whole."""
    from aiobotocore.response import AioReadTimeoutError
    from aiohttp import ClientPayloadError
    from botocore.exceptions import FlexibleChecksumError, ResponseStreamingError
    from urllib3.exceptions import IncompleteRead

    return (
        AioReadTimeoutError,
        ResponseStreamingError,
        ClientPayloadError,
        IncompleteRead,
        FlexibleChecksumError,
    )


@dataclass(frozen=True)
class Fault:
    """A failed attempt that another may mend: why, on one line (``reason``), and the seconds
    the server asked to wait (``asked``, its ``Retry-After``; None when it asked nothing)."""

    reason: str
    asked: float | None = None


class Failing(Exception):
    """Raised by an attempt to say it failed in a way another may mend, with its :class:`Fault`
    (an answer such as HTTP 503 rather than an exception of a client); :func:`retried` retries
    it whatever its classifier says."""

    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.reason)
        self.fault = fault


GiveUp = Callable[[Fault, float, "str | None"], BaseException]
"""``(last fault, seconds waited in all, why no further attempt is made when the server asked
for too long a wait, else None) -> the error to raise`` once the attempts are spent."""


def retried(
    attempt: Callable[[], T],
    what: str,
    fault_of: Callable[[BaseException], Fault | None] = lambda exc: None,
    *,
    attempts: int = ATTEMPTS,
    spent: list[int] | None = None,
    give_up: GiveUp | None = None,
    sleep: Callable[[float], None] | None = None,
    before_retry: Callable[[], None] | None = None,
    pace: Callable[[int], float] | None = None,
) -> T:
    """``attempt()`` until it returns, made again while it raises :class:`Failing` or what
    ``fault_of`` names a :class:`Fault`: the one retry policy of every transport, on tenacity.

    ``what`` names what is tried in each line said (empty: the fault's reason names it). At
    most ``attempts`` attempts fail, counted in ``spent[0]`` when several calls share one
    budget (the requests of one streamed read; each call starts afresh when None). Before each
    retry the wait is ``pace(n)`` (seconds before attempt ``n``, 2 the first retry) when given,
    else :func:`wait_for` (backoff, or the server's ``Retry-After`` when longer),
    said on stderr (:func:`~neuronbuild.notices.retrying`: ``what: reason``), ``before_retry``
    is called (to drop a broken connection) and the wait is spent in ``sleep`` (default
    :func:`pause`, which a dropped read ends).

    Raises:
        Whatever ``attempt`` raised, at once, when ``fault_of`` names no fault in it.
        ``give_up(...)`` (default: :class:`StoreError`, ``what: reason (tried N times)``) when
            the attempts are spent or the server asks for a wait over :data:`MAX_RETRY_AFTER`.
        Abandoned: the read was dropped during a wait.
    """
    try:  # the first attempt on its own: a healthy store never loads tenacity (serve's start)
        return attempt()
    except Exception as exc:
        if not isinstance(exc, Failing) and fault_of(exc) is None:
            raise
        first = exc
    import tenacity

    pending = [first]

    def again() -> T:  # tenacity's first attempt is the one that just failed
        if pending:
            raise pending.pop()
        return attempt()

    budget = spent if spent is not None else [0]
    last: list[Fault] = []

    def worth_another(state: tenacity.RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome is not None else None
        fault = exc.fault if isinstance(exc, Failing) else None if exc is None else fault_of(exc)
        if fault is None:
            return False  # a success, or no fault of ours: tenacity returns or raises it
        budget[0] += 1
        last[:] = [fault]
        return True

    def refused(state: tenacity.RetryCallState) -> str | None:
        return None if budget[0] >= attempts else too_long(last[0].asked)

    def stop(state: tenacity.RetryCallState) -> bool:
        return budget[0] >= attempts or refused(state) is not None

    def wait(state: tenacity.RetryCallState) -> float:  # tenacity may ask it before stop
        if pace is not None:
            return pace(budget[0] + 1)
        asked = last[0].asked
        return 0.0 if too_long(asked) is not None else wait_for(budget[0] + 1, asked)

    def say(state: tenacity.RetryCallState) -> None:
        seconds = state.next_action.sleep if state.next_action is not None else 0.0
        retrying(
            budget[0] + 1,
            attempts,
            seconds,
            f"{what}: {last[0].reason}" if what else last[0].reason,
        )
        if before_retry is not None:
            before_retry()

    def stopped(state: tenacity.RetryCallState) -> T:
        fault, why = last[0], refused(state)
        if give_up is not None:
            raise give_up(fault, state.idle_for, why)
        named = f"{what}: " if what else ""
        if why is not None:
            raise StoreError(f"{named}{why} ({fault.reason})")
        raise StoreError(f"{named}{fault.reason} (tried {attempts} times)")

    policy = tenacity.Retrying(
        retry=worth_another,
        stop=stop,
        wait=wait,
        sleep=sleep or pause,
        before_sleep=say,
        retry_error_callback=stopped,
    )
    return policy(again)


def body_retried(read: Callable[[], T], what: str) -> T:
    """``read()`` tried up to :data:`ATTEMPTS` times while it fails with a :func:`body_faults`
    fault, each retry said on stderr (``what``: the object read) after :func:`backoff`.

    Raises:
        StoreError: the last attempt failed too (one line: ``what``, the fault, the attempts).
        Whatever ``read`` raised, at once, when it is no body fault.
    """
    faults = body_faults()

    def fault_of(exc: BaseException) -> Fault | None:
        return Fault(one_line(str(exc) or type(exc).__name__)) if isinstance(exc, faults) else None

    return retried(read, what, fault_of)


def watch_s3(fs: Any) -> None:
    """Make the s3fs file system ``fs`` retry its requests through :func:`needs_retry` only
    (once per client: a cached file system keeps its handler), with s3fs's own silent loop
    around them off (``fs.retries = 1``; its body-read retries are :func:`body_retried`'s)."""
    fs.retries = 1
    events = fs.s3.meta.events
    events.register_first("needs-retry.s3", needs_retry, unique_id="neuronbuild-needs-retry")
