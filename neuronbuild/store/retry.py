"""Retries against a store: which faults are retried, how long to wait, and the one line that
says so on stderr, ``retrying (2/5) in 4.0 s: <reason>``, instead of a client's silent retries
(12 to 18 s of silence with botocore's own, against an endpoint answering 500).

On S3 the decision is taken here, per request: botocore's retry handler is left a single attempt
(:data:`S3_RETRIES`) and :func:`watch_s3` puts :func:`needs_retry` first on the client's
``needs-retry`` event, so a multipart upload retries the part that failed, not the whole file.
What is retried is what botocore's standard retry mode retries (its ``TransientRetryableChecker``
and ``ThrottledRetryableChecker``, botocore/retries/standard.py): HTTP 500, 502, 503, 504 and 429,
throttling and request-timeout error codes, and connection or read faults. The ref's
compare-and-swap and a blob upload whose stored size differs retry in
:mod:`neuronbuild.store.cas` and report through :func:`report` too.
"""

from __future__ import annotations

import random
import sys
from typing import Any

from tqdm import tqdm

from neuronbuild.human import duration
from neuronbuild.verbosity import QUIET, verbosity

ATTEMPTS = 5
"""Attempts of one S3 request, the first included (botocore's standard mode also makes 5)."""

BASE_SECONDS = 1.0
"""The wait before the first retry; it doubles for each further one."""

MAX_SECONDS = 20.0
"""The longest wait between two attempts (botocore's standard mode caps at 20 s too)."""

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


def report(attempt: int, attempts: int, seconds: float, reason: str) -> None:
    """Print ``retrying (attempt/attempts) in <seconds>: <reason>`` on stderr, above any
    progress bar, unless ``-q`` asked for errors and results only. ``attempt`` is the number of
    the attempt about to be made (2: the first retry)."""
    if verbosity() <= QUIET:
        return
    tqdm.write(f"retrying ({attempt}/{attempts}) in {duration(seconds)}: {reason}", file=sys.stderr)


def backoff(attempt: int) -> float:
    """Seconds to wait before ``attempt`` (2: the first retry): :data:`BASE_SECONDS` doubled
    for each retry, capped at :data:`MAX_SECONDS`, between half and all of it at random so that
    builders hit by one outage do not retry in step."""
    return min(MAX_SECONDS, BASE_SECONDS * 2.0 ** (attempt - 2)) * random.uniform(0.5, 1.0)


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
    seconds = backoff(attempts + 1)
    name = getattr(operation, "name", None)
    report(attempts + 1, ATTEMPTS, seconds, f"{name}: {fault}" if name else fault)
    return seconds


def watch_s3(fs: Any) -> None:
    """Make the s3fs file system ``fs`` retry its requests through :func:`needs_retry` (once
    per client: a cached file system keeps its handler)."""
    events = fs.s3.meta.events
    events.register_first("needs-retry.s3", needs_retry, unique_id="neuronbuild-needs-retry")
