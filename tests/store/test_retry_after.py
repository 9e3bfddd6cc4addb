"""Issue 46 item 16: a server's ``Retry-After`` is waited for (up to
:data:`~neuronbuild.transports.retry.MAX_RETRY_AFTER`), on S3's throttling answers as on a
registry's (``tests/store/test_oci_faults.py`` runs the registry's through a proxy)."""

from __future__ import annotations

import time
from email.utils import formatdate
from types import SimpleNamespace

import pytest

from neuronbuild.notices import set_retry_listener
from neuronbuild.transports import retry


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert retry.retry_after("7") == 7.0
    assert retry.retry_after(None) is None and retry.retry_after("soon") is None
    assert retry.retry_after("²") is None  # a digit to str.isdigit, not to float()
    later = retry.retry_after(formatdate(time.time() + 30, usegmt=True))
    assert later is not None and 25 <= later <= 30
    assert retry.retry_after(formatdate(time.time() - 30, usegmt=True)) == 0.0


def throttled(after: str) -> tuple[object, dict[str, object]]:
    """botocore's ``(http_response, parsed)`` of S3's 503 SlowDown with ``Retry-After``."""
    http = SimpleNamespace(status_code=503, headers={"Retry-After": after})
    return http, {"Error": {"Code": "SlowDown", "Message": "Please reduce your request rate."}}


def test_an_s3_throttle_waits_what_it_asks_and_an_unbounded_ask_is_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(retry, "BASE_SECONDS", 0.01)
    said: list[tuple[float, str]] = []
    previous = set_retry_listener(lambda attempt, attempts, s, why: said.append((s, why)))
    try:
        operation = SimpleNamespace(name="GetObject")
        assert retry.needs_retry(1, operation, throttled("3")) == 3.0
        assert said == [(3.0, "GetObject: HTTP 503 SlowDown (Please reduce your request rate.) "
                         "(Retry-After: 3 s)")]  # fmt: skip
        assert retry.needs_retry(1, operation, throttled("600")) is False
        assert len(said) == 1
    finally:
        set_retry_listener(previous)
