"""Blob GETs on S3 go through obstore (issue 21, item 2), everything else stays on s3fs: seen at
a proxy by each request's User-Agent (moto on loopback behind
:class:`tests.lib.faulty_proxy.FaultyProxy`). Without obstore installed the same blobs come
through s3fs. obstore's faults are told apart as botocore's are (:func:`~neuronbuild.transports.s3_fast.fault_of`),
its client is never pickled, and its credentials are botocore's."""

from __future__ import annotations

import os
import pickle
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronbuild.digest import DigestMismatch
from neuronbuild.errors import StoreError
from neuronbuild.store import cas as cas_module
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord
from neuronbuild.transports import backends, ranged, s3_fast
from tests.lib.faulty_proxy import FaultyProxy
from tests.lib.s3 import moto_s3

BUCKET = "neuronbuild-fast"
PART = 256 << 10


@pytest.fixture(scope="module")
def moto_port() -> Iterator[int]:
    with moto_s3(BUCKET) as env:
        yield int(env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])


@pytest.fixture
def proxied(moto_port: int, monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultyProxy]:
    """moto behind a proxy that records each request's User-Agent; blobs of 1 MiB or more are
    read in 256 KiB ranges."""
    import s3fs

    monkeypatch.setattr(backends, "RANGED_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(ranged, "PART_BYTES", PART)
    with FaultyProxy(moto_port) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        s3fs.S3FileSystem.clear_instance_cache()
        yield proxy
    s3fs.S3FileSystem.clear_instance_cache()


def put_blob(store: Store, tmp_path: Path, data: bytes) -> FileRecord:
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    digest, size = store.put_file(src)
    return FileRecord("f", digest, size)


def blob_gets(proxy: FaultyProxy) -> list[str]:
    """The User-Agents of the GETs of blobs the proxy saw."""
    return [agent for method, path, agent in proxy.agents if method == "GET" and "/blobs/" in path]


@pytest.mark.parametrize("size", [4000, 3 << 20], ids=["small", "ranged"])
@pytest.mark.slow
def test_blob_gets_go_through_obstore_and_the_rest_through_botocore(
    proxied: FaultyProxy, tmp_path: Path, size: int
) -> None:
    store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}", create=True)
    data = os.urandom(size)
    file = put_blob(store, tmp_path, data)
    proxied.agents.clear()
    store.fetch_blob(file, tmp_path / "out.bin")
    assert store.check_blob(file) is None
    assert (tmp_path / "out.bin").read_bytes() == data
    gets = blob_gets(proxied)
    per_read = size // PART if size >= 1 << 20 else 1  # the ranged GETs, or one
    assert len(gets) == 2 * per_read, gets  # the fetch's and the check's
    assert gets and all("botocore" not in agent.lower() for agent in gets), gets
    others = [agent for method, _, agent in proxied.agents if method != "GET"]
    assert all("botocore" in agent.lower() for agent in others), others  # the HEADs
    # A small blob's one GET tells its size: no HEAD before it; a large one's ranges need one.
    assert len(others) == (2 if size >= 1 << 20 else 0), others


@pytest.mark.slow
def test_without_obstore_blob_gets_go_through_s3fs(
    proxied: FaultyProxy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(s3_fast, "obstore_installed", lambda: False)
    store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}", create=True)
    data = os.urandom(4000)
    file = put_blob(store, tmp_path, data)
    proxied.agents.clear()
    store.fetch_blob(file, tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == data
    gets = blob_gets(proxied)
    assert gets and all("botocore" in agent.lower() for agent in gets), gets


def test_a_backend_sent_to_another_process_makes_its_own_obstore_client(
    proxied: FaultyProxy, tmp_path: Path
) -> None:
    store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}", create=True)
    data = os.urandom(4000)
    file = put_blob(store, tmp_path, data)
    store.fetch_blob(file, tmp_path / "first.bin")
    assert isinstance(store.backend, backends.ObjectBackend)
    assert store.backend.fast.get() is not None
    received = pickle.loads(pickle.dumps(store))  # as a Ray task receives it
    assert received.backend.fast._client is None  # made anew there, on its first blob
    received.fetch_blob(file, tmp_path / "second.bin")
    assert (tmp_path / "second.bin").read_bytes() == data


def test_a_missing_blob_is_missing_through_obstore_too(proxied: FaultyProxy) -> None:
    store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}", create=True)
    client = store.backend.fast.get()  # type: ignore[attr-defined]
    assert client is not None
    with pytest.raises(FileNotFoundError):
        client.open_stream("nothing/here", 10, f"s3://{BUCKET}/nothing/here")
    with pytest.raises(FileNotFoundError):
        client.read_range("nothing/here", 0, 10, f"s3://{BUCKET}/nothing/here")


def test_obstores_credentials_are_the_ones_s3fs_signs_with(monkeypatch: pytest.MonkeyPatch) -> None:
    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.connect()
    provided = s3_fast._S3fsCredentials(fs)()
    assert (provided["access_key_id"], provided["secret_access_key"]) == ("AKIDEXAMPLE", "secret")
    assert provided.get("token") == "token" and provided["expires_at"] is not None
    # fsspec's own settings (FSSPEC_S3_KEY, ...) reach s3fs as options, not botocore's chain.
    fs = s3fs.S3FileSystem(skip_instance_cache=True, key="fsspec-key", secret="fsspec-secret")
    fs.connect()
    provided = s3_fast._S3fsCredentials(fs)()
    assert (provided["access_key_id"], provided["secret_access_key"]) == (
        "fsspec-key",
        "fsspec-secret",
    )


def test_blob_gets_on_aws_itself_stay_on_s3fs(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore follows S3's redirect to a bucket's region; obstore would not."""
    import s3fs

    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.connect()
    assert s3_fast.LazyFastS3(fs, "bucket").get() is None


DEBUG = '\n\nDebug source:\nGeneric {\n    store: "S3",\n    source: RetryError(RetryErrorImpl {'


@pytest.mark.parametrize(
    ("text", "reason", "transient"),
    [
        pytest.param(
            "Generic S3 error: Error performing GET http://h/b/k in 1ms - Server returned "
            "non-2xx status code: 500 Internal Server Error: <Error><Code>InternalError</Code>"
            "<Message>injected</Message></Error>"
            f"{DEBUG} inner: Status {{ status: 500, body: None }} }})}}",
            "HTTP 500 InternalError (injected)",
            True,
            id="500",
        ),
        pytest.param(
            "Generic S3 error: Error performing GET http://h/b/k in 1ms - Server returned "
            "non-2xx status code: 503 Service Unavailable: <Error><Code>SlowDown</Code>"
            f"</Error>{DEBUG} inner: Status {{ status: 503, body: None }} }})}}",
            "HTTP 503 SlowDown",
            True,
            id="slow-down",
        ),
        pytest.param(
            "Generic S3 error: Error performing GET http://h/b/k in 1ms - Server returned "
            "non-2xx status code: 400 Bad Request: <Error><Code>InvalidArgument</Code>"
            f"</Error>{DEBUG} inner: Status {{ status: 400, body: None }} }})}}",
            "HTTP 400 InvalidArgument",
            False,
            id="400",
        ),
        pytest.param(
            "Generic S3 error: Error performing GET http://h/b/k in 1s - HTTP error: error "
            f"sending request{DEBUG} inner: Http(HttpError {{\n kind: Timeout,\n source: x }}",
            "Timeout: HTTP error: error sending request",
            True,
            id="timeout",
        ),
        pytest.param(
            "Generic S3 error: HTTP error: request or response body error\n\nDebug source:\n"
            "Generic { source: HttpError {\n        kind: Interrupted,\n source: x } }",
            "Interrupted: HTTP error: request or response body error",
            True,
            id="body-cut",
        ),
        pytest.param("Generic S3 error: Received non-partial response", "", False, id="other"),
    ],
)
def test_obstore_faults_are_retried_where_botocores_are(
    text: str, reason: str, transient: bool
) -> None:
    found, retried = s3_fast.fault_of(Exception(text))
    assert retried is transient
    assert "\n" not in found
    if reason:
        assert found == reason


def test_a_fault_that_keeps_coming_is_one_store_error_after_five_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from neuronbuild.transports import retry

    monkeypatch.setattr(retry, "BASE_SECONDS", 0.01)
    fault = Exception(
        "Generic S3 error: HTTP error: request or response body error\n\nDebug source:\n"
        "Generic { source: HttpError {\n        kind: Interrupted,\n source: x } }"
    )
    client = object.__new__(s3_fast.FastS3)
    made: list[int] = []

    def request() -> None:
        made.append(1)
        raise fault

    failures = [0]
    with pytest.raises(StoreError, match=r"^s3://b/k: Interrupted: .* \(tried 5 times\)$"):
        client._retried(request, "s3://b/k", failures)
    assert len(made) == failures[0] == retry.ATTEMPTS
    with pytest.raises(StoreError, match=r"^s3://b/k: no$"):
        client._retried(lambda: (made.append(1), _raise(Exception("no")))[0], "s3://b/k", [0])
    assert len(made) == retry.ATTEMPTS + 1  # a fault that is not transient: at once


def _raise(exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize(
    ("found", "stored", "raised"),
    [
        pytest.param(["a", "b", "c", "d", "e"], None, StoreError, id="no-checksum-changing"),
        pytest.param(["a", "b", "a"], None, DigestMismatch, id="no-checksum-same-twice"),
        pytest.param(["a"] * 5, "whole", StoreError, id="whole-at-rest"),
        pytest.param(["a"], "other", DigestMismatch, id="other-bytes-at-rest"),
    ],
)
def test_a_blob_whose_bytes_mismatch_over_the_network_is_read_again_then_judged(
    moto_port: int,
    monkeypatch: pytest.MonkeyPatch,
    found: list[str],
    stored: str | None,
    raised: type[Exception],
) -> None:
    """Bytes changing from read to read are the network's (exit 3); the same wrong bytes twice,
    or S3's own SHA-256 of other bytes, are the store's (exit 2)."""
    store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}", create=True)
    file = FileRecord("f", "sha256:" + "ab" * 32, 3)
    held = {"whole": "ab" * 32, "other": "cd" * 32, None: None}[stored]
    monkeypatch.setattr(store.backend, "stored_sha256", lambda path: held)
    monkeypatch.setattr(cas_module.time, "sleep", lambda seconds: None)
    reads = iter(found)

    def read() -> None:
        raise DigestMismatch("corrupt", next(reads))

    with pytest.raises(raised):
        store._read_blob(file, read)
    assert next(reads, None) is None  # read exactly as many times as the verdict needs


def test_progress_of_a_blob_read_again_stops_at_its_size(
    moto_port: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read whose bytes mismatched in transit is read again: the progress told counts each of
    the blob's bytes once, not once per read."""
    import io

    store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}", create=True)
    data = os.urandom(300_000)
    file = put_blob(store, tmp_path, data)
    reads = iter([data[:-1] + b"\0", data])  # flipped in transit, then whole
    monkeypatch.setattr(store.backend, "open_read", lambda path, size: io.BytesIO(next(reads)))
    monkeypatch.setattr(store.backend, "stored_sha256", lambda path: file.digest.split(":")[1])
    monkeypatch.setattr(cas_module.time, "sleep", lambda seconds: None)
    told: list[int] = []
    store.fetch_blob(file, tmp_path / "out", told.append)
    assert (tmp_path / "out").read_bytes() == data
    assert sum(told) == len(data)


def test_a_body_that_breaks_is_read_on_from_where_it_broke_through_obstore(
    proxied: FaultyProxy, tmp_path: Path
) -> None:
    """A streamed GET whose body is cut mid-way is asked for again from the first byte not yet
    had (``Range: bytes=N-``), each retry said, all on one budget of attempts."""
    from neuronbuild.notices import set_retry_listener

    store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}", create=True)
    data = os.urandom(40_000)
    file = put_blob(store, tmp_path, data)
    said: list[str] = []
    previous = set_retry_listener(lambda attempt, attempts, seconds, why: said.append(why))
    proxied.cut_every, proxied.max_cuts, proxied.body_path = 1, 2, "/blobs/"
    try:
        store.fetch_blob(file, tmp_path / "out.bin")
    finally:
        set_retry_listener(previous)
    assert (tmp_path / "out.bin").read_bytes() == data
    assert proxied.cut == 2 and len(said) == 2
    assert all(why.startswith(f"s3://{BUCKET}/") for why in said)
    assert len(blob_gets(proxied)) == 3  # the first GET and one per break
