"""The one retry policy every transport uses (``neuronbuild.transports.retry.retried``, on
tenacity, issue 40 item 3): what it retries, how long it waits, what it says, when it gives up,
and the blob upload that retries through it when the stored size differs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from neuronbuild.errors import StoreError
from neuronbuild.notices import set_retry_listener
from neuronbuild.store.cas import Store
from neuronbuild.transports import retry


@pytest.fixture
def said() -> Iterator[list[tuple[int, int, float, str]]]:
    lines: list[tuple[int, int, float, str]] = []
    previous = set_retry_listener(lambda *line: lines.append(line))
    yield lines
    set_retry_listener(previous)


def failing(times: int, exc: BaseException, made: list[int]) -> Callable[[], str]:
    """An attempt that raises ``exc`` its first ``times`` times, then returns ``done``; each
    call is counted in ``made``."""

    def attempt() -> str:
        made.append(1)
        if len(made) <= times:
            raise exc
        return "done"

    return attempt


def test_a_fault_is_retried_said_and_spent_in_the_wait(said: list[tuple]) -> None:
    made: list[int] = []
    waits: list[float] = []
    fault = retry.Failing(retry.Fault("HTTP 503"))
    got = retry.retried(failing(2, fault, made), "s3://b/k", sleep=waits.append)
    assert got == "done" and len(made) == 3
    assert [(a, n, why) for a, n, _, why in said] == [
        (2, 5, "s3://b/k: HTTP 503"),
        (3, 5, "s3://b/k: HTTP 503"),
    ]
    assert waits == [s for _, _, s, _ in said] and all(0.0 < w <= 0.02 for w in waits)


def test_what_the_classifier_names_no_fault_is_raised_at_once(said: list[tuple]) -> None:
    made: list[int] = []
    with pytest.raises(KeyError):
        retry.retried(failing(9, KeyError("x"), made), "w", lambda exc: None)
    assert len(made) == 1 and said == []


def test_the_attempts_are_one_budget_across_calls_and_end_in_one_line() -> None:
    spent = [0]
    fault = OSError("reset")

    def classify(exc: BaseException) -> retry.Fault | None:
        return retry.Fault(str(exc)) if isinstance(exc, OSError) else None

    made: list[int] = []
    retry.retried(failing(3, fault, made), "blob", classify, spent=spent, sleep=lambda s: None)
    assert spent == [3]
    with pytest.raises(StoreError, match=r"^blob: reset \(tried 5 times\)$"):
        retry.retried(failing(9, fault, []), "blob", classify, spent=spent, sleep=lambda s: None)
    assert spent == [5]


def test_a_server_that_asks_for_too_long_a_wait_is_given_up_on_at_once(said: list[tuple]) -> None:
    made: list[int] = []
    asked = retry.Failing(retry.Fault("HTTP 429", asked=3600.0))
    with pytest.raises(StoreError, match=r"^reg: asked to retry after 3600 s, over the 60 s .*"):
        retry.retried(failing(9, asked, made), "reg", sleep=lambda s: None)
    assert len(made) == 1 and said == []
    waits: list[float] = []
    polite = retry.Failing(retry.Fault("HTTP 429", asked=2.0))
    retry.retried(failing(1, polite, []), "reg", sleep=waits.append)
    assert waits == [2.0]


def test_a_blob_upload_that_leaves_the_wrong_size_is_made_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, said: list[tuple]
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    src = tmp_path / "blob"
    src.write_bytes(b"x" * 100)
    real = store.backend.put_file
    uploads: list[int] = []

    def put_file(local: str | Path, path: str, on_bytes: object = None) -> None:
        uploads.append(1)
        if len(uploads) < 3:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_bytes(b"x" * 99)  # a short blob, as an upload cut off
            return
        real(local, path)

    monkeypatch.setattr(store.backend, "put_file", put_file)
    digest, size = store.put_file(src)
    assert size == 100 and len(uploads) == 3
    assert [why for *_, why in said] == [
        f"{store.blob_url(digest)}: the stored size differs from 100 bytes"
    ] * 2
    uploads.clear()
    monkeypatch.setattr(store.backend, "put_file", lambda *a, **k: uploads.append(1))
    other = tmp_path / "other"
    other.write_bytes(b"y" * 10)
    with pytest.raises(StoreError, match=r": uploads keep leaving the wrong size$"):
        store.put_file(other)
    assert len(uploads) == 3
