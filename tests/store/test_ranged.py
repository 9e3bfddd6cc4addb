"""A large S3 blob is read as concurrent ranged GETs, hashed in order as they arrive (issue 21,
item 2): the bytes come back whole and in order, a bounded number of parts ahead, a part's fault
surfaces where it lies, and over a real S3 API (moto on loopback) a blob is fetched in parts,
verified, retried where a body breaks, and refused whole when it is corrupt, short or long."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronbuild.digest import sha256_digest
from neuronbuild.errors import StoreDataInvalid, StoreError
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord
from neuronbuild.transports import backends, ranged
from neuronbuild.transports.ranged import RangedReads
from tests.lib.faulty_proxy import FaultyProxy
from tests.lib.s3 import moto_s3, s3_requests

BUCKET = "neuronbuild-ranged"
PART = 256 << 10


def read_all(stream: RangedReads, n: int) -> bytes:
    out = bytearray()
    while chunk := stream.read(n):
        out += chunk
    return bytes(out)


def test_parts_come_back_whole_and_in_order_whatever_order_they_finish_in() -> None:
    data = os.urandom(1000)
    late = threading.Event()

    def read_range(start: int, end: int) -> bytes:
        if start == 0:
            late.wait(5)  # the first part finishes last
        else:
            late.set()
        return data[start:end]

    with RangedReads(read_range, len(data), part=64, in_flight=4) as stream:
        assert read_all(stream, 7) == data
        assert stream.read(1) == b""


def test_only_in_flight_parts_are_asked_for_ahead_of_the_reader() -> None:
    data = os.urandom(64 * 20)
    asked: list[int] = []

    def read_range(start: int, end: int) -> bytes:
        asked.append(start)
        return data[start:end]

    with RangedReads(read_range, len(data), part=64, in_flight=3) as stream:
        for parts_read in range(1, 6):
            assert stream.read(64) == data[(parts_read - 1) * 64 : parts_read * 64]
            assert len(asked) <= parts_read + 3
    assert len(asked) < 20


def test_a_failing_part_surfaces_after_the_parts_before_it() -> None:
    data = os.urandom(640)

    def read_range(start: int, end: int) -> bytes:
        if start == 128:
            raise StoreError("s3://b/blob: cannot read: broken (tried 5 times)")
        return data[start:end]

    with RangedReads(read_range, len(data), part=64, in_flight=4) as stream:
        assert stream.read(64) + stream.read(64) == data[:128]
        with pytest.raises(StoreError, match="tried 5 times"):
            stream.read(64)


def test_parts_still_retrying_stop_at_their_next_wait_once_the_reader_gives_up() -> None:
    """A part that failed for good ends the read; the parts behind it, waiting out their own
    retries, give up at once instead of holding the process (its pool threads) for them."""
    from neuronbuild.transports import retry

    waiting, outcomes = threading.Barrier(4), []

    def read_range(start: int, end: int) -> bytes:
        if start == 0:
            waiting.wait(10)
            raise StoreError("s3://b/blob: cannot read: broken (tried 5 times)")
        waiting.wait(10)
        try:
            retry.pause(60)  # a retry's backoff, as body_retried and obstore's reads wait
        except retry.Abandoned:
            outcomes.append("abandoned")
            raise
        outcomes.append("waited")
        return b"x" * (end - start)

    stream = RangedReads(read_range, 256, part=64, in_flight=4)
    with pytest.raises(StoreError, match="tried 5 times"):
        stream.read(64)
    stream.close()
    stream._pool.shutdown(wait=True)  # returns once every part's thread is done
    assert outcomes == ["abandoned"] * 3


def test_a_short_object_ends_the_stream_where_its_bytes_end() -> None:
    data = os.urandom(100)  # the store said 640 bytes; the object holds 100
    with RangedReads(lambda s, e: data[s:e], 640, part=64, in_flight=4) as stream:
        assert read_all(stream, 1000) == data


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    with moto_s3(BUCKET) as env:
        yield env


@pytest.fixture
def ranged_store(s3_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Store:
    """A new S3 store whose blobs of 1 MiB or more are read in 256 KiB ranges."""
    monkeypatch.setattr(backends, "RANGED_MIN_BYTES", 1 << 20)
    monkeypatch.setattr(ranged, "PART_BYTES", PART)
    return Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}", create=True)


def put_blob(store: Store, tmp_path: Path, data: bytes) -> FileRecord:
    src = tmp_path / "src.bin"
    src.write_bytes(data)
    digest, size = store.put_file(src)
    return FileRecord("f", digest, size)


def test_a_large_blob_is_fetched_in_ranged_gets_and_verified(
    ranged_store: Store, tmp_path: Path
) -> None:
    data = os.urandom(3 << 20)
    file = put_blob(ranged_store, tmp_path, data)
    key = ranged_store.layout.blob(file.digest).partition("/")[2]
    with s3_requests() as seen:
        ranged_store.fetch_blob(file, tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == data
    gets = [path for method, path in seen if method == "GET" and key in path]
    assert len(gets) == len(data) // PART


@pytest.mark.parametrize(
    "stored",
    [
        pytest.param(lambda d: d[:-1] + bytes([d[-1] ^ 1]), id="flipped"),
        pytest.param(lambda d: d[: len(d) // 2], id="short"),
        pytest.param(lambda d: d + b"x", id="long"),
    ],
)
def test_a_large_blob_whose_bytes_differ_is_refused_and_nothing_is_written(
    ranged_store: Store, tmp_path: Path, stored: object
) -> None:
    data = os.urandom(2 << 20)
    file = put_blob(ranged_store, tmp_path, data)
    assert callable(stored)
    ranged_store.backend.fs.pipe_file(ranged_store.layout.blob(file.digest), stored(data))
    with pytest.raises(StoreDataInvalid, match="is corrupt"):
        ranged_store.fetch_blob(file, tmp_path / "out.bin")
    assert list(tmp_path.iterdir()) == [tmp_path / "src.bin"]
    assert sha256_digest(data) == file.digest


@pytest.mark.slow
def test_a_ranged_get_whose_body_breaks_is_read_again(
    ranged_store: Store, s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    data = os.urandom(2 << 20)
    file = put_blob(ranged_store, tmp_path, data)
    moto_port = int(s3_env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    with FaultyProxy(moto_port, body_path="/blobs/", cut_every=3) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        s3fs.S3FileSystem.clear_instance_cache()
        Store(ranged_store.url).fetch_blob(file, tmp_path / "out.bin")
        assert proxy.cut >= 2
    s3fs.S3FileSystem.clear_instance_cache()
    assert (tmp_path / "out.bin").read_bytes() == data
