"""Blob GETs on S3 through obstore, the client made for throughput (issue 21, item 2): on
SeaweedFS on loopback (``bench/s3_pull.py``) it reads 1.2 to 1.7 times as fast as s3fs at 1 GB,
and boto3 with the CRT is never ahead of it. Only the bytes of blobs go this way; listings, small
records, HEADs, conditional PUTs and multipart uploads stay on s3fs
(:mod:`neuronbuild.transports.backends`).

The client is set up once per :class:`~neuronbuild.transports.backends.ObjectBackend`, on the first
blob read, from what s3fs's own botocore client uses, so both talk to the same place as the same
principal: the endpoint and region of s3fs's client (``$AWS_ENDPOINT_URL``, the config file,
...; path-style requests, as botocore makes them on a custom endpoint), and the credentials s3fs
signs with (:class:`_S3fsCredentials`), handed to obstore by a ``credential_provider``. On AWS's
own endpoints blob GETs stay on s3fs (:class:`LazyFastS3` says why). It is never pickled: a
backend sent to a Ray task makes its own there.

Retries stay the store's (:mod:`.retry`): obstore's own are off (``max_retries: 0``); what is
retried is what :func:`~.retry.s3_fault` retries for botocore (HTTP 429, 500, 502, 503, 504,
throttling codes, connection, timeout and body faults), each retry said on stderr as
``retrying (2/5) in 1.0 s: s3://bucket/key: <reason>``, after :func:`~.retry.backoff`; after
the last attempt a :class:`~neuronbuild.errors.StoreError` of one line. A missing object is
FileNotFoundError (the store reports it missing); any other failure (denied, unauthenticated, a
4xx) is a StoreError at once. A body that breaks mid-stream is asked for again from the first
byte not yet handed on (a ranged GET), so no byte is hashed twice.

Where obstore is not installed (an install with s3fs alone), blob GETs stay on s3fs: the same
bytes, verified the same, slower. The ``s3`` extra installs both.
"""

from __future__ import annotations

import importlib.util
import re
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from neuronbuild import envs
from neuronbuild.errors import StoreError
from neuronbuild.transports import retry

if TYPE_CHECKING:
    from obstore.store import S3Credential, S3Store

T = TypeVar("T")

STREAM_CHUNK = 1 << 20
"""Bytes the streaming GET of a small blob hands on at a time (at least; obstore gathers the
network's pieces to this size), as :data:`neuronbuild.digest.CHUNK` reads them."""

CREDENTIAL_SECONDS = 300
"""How long obstore keeps one set of credentials before asking botocore again (which refreshes
temporary ones well before they expire)."""

TRANSIENT_KINDS = frozenset({"Connect", "Request", "Timeout", "Interrupted", "Decode"})
"""obstore's (object_store's) kinds of HTTP error retried: no connection, a request that could
not be sent or timed out, a body cut or undecodable mid-stream (``HttpErrorKind``)."""

_STATUS = re.compile(r"\bstatus: (\d{3})\b")
_KIND = re.compile(r"HttpError \{\s*kind: (\w+)")
_CODE = re.compile(r"<Code>([^<]*)</Code>")
_MESSAGE = re.compile(r"<Message>([^<]*)</Message>")
_PREFIX = re.compile(r"^(?:Generic S3 error: )?(?:Error performing \w+ \S+ in \S+ - )?")


def obstore_installed() -> bool:
    """Whether obstore can be imported here (blob GETs go through it only then)."""
    return importlib.util.find_spec("obstore") is not None


class _S3fsCredentials:
    """obstore's ``credential_provider``: the credentials s3fs's own client signs with, valid
    for :data:`CREDENTIAL_SECONDS`: its explicit ``key``/``secret``/``token`` (fsspec's
    ``FSSPEC_S3_KEY`` and the like, or options) where it has them, else its aiobotocore
    session's resolved chain (environment, its profile, instance metadata), frozen at each
    call on s3fs's own event loop (botocore refreshes temporary ones)."""

    def __init__(self, fs: Any) -> None:
        self.fs = fs

    def __call__(self) -> S3Credential:
        from fsspec.asyn import sync

        fs = self.fs
        if fs.key and fs.secret:
            key, secret, token = fs.key, fs.secret, fs.token
        else:
            credentials = sync(fs.loop, fs.session.get_credentials)
            if credentials is None:
                raise StoreError("no AWS credentials found")
            frozen = sync(fs.loop, credentials.get_frozen_credentials)
            key, secret, token = frozen.access_key, frozen.secret_key, frozen.token
        return {
            "access_key_id": key,
            "secret_access_key": secret,
            "token": token,
            "expires_at": datetime.now(UTC) + timedelta(seconds=CREDENTIAL_SECONDS),
        }


def _is_aws(endpoint: str) -> bool:
    host = endpoint.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0]
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


def fault_of(exc: BaseException) -> tuple[str, bool]:
    """One line saying why an obstore request failed, and whether another attempt may help
    (the faults :func:`~.retry.s3_fault` retries on botocore: HTTP 429/500/502/503/504, an S3
    throttling or timeout code, a connection, timeout or body fault)."""
    text = str(exc)
    summary, _, debug = text.partition("\n\nDebug source:")
    status_found = _STATUS.search(debug)
    kind_found = _KIND.search(debug)
    code = (_CODE.search(text) or [None, ""])[1]
    message = (_MESSAGE.search(text) or [None, ""])[1]
    if status_found:
        status = int(status_found[1])
        parts = (f"HTTP {status}", code, message and f"({message})")
        reason = " ".join(part for part in parts if part)
        transient = status in retry.TRANSIENT_STATUS or code in retry.TRANSIENT_CODES
        return retry.one_line(reason), transient
    reason = _PREFIX.sub("", retry.one_line(summary)) or type(exc).__name__
    if kind_found:
        return retry.one_line(f"{kind_found[1]}: {reason}"), kind_found[1] in TRANSIENT_KINDS
    return retry.one_line(reason), False


class FastS3:
    """obstore's client for one bucket's blobs, made from the s3fs file system ``fs`` (its
    botocore client's endpoint and region, botocore's credentials: see the module's doc).

    Raises:
        StoreError: obstore cannot be set up (no credentials found, a malformed endpoint).
    """

    def __init__(self, fs: Any, bucket: str) -> None:
        from obstore.store import S3Store

        self.bucket = bucket
        meta = fs.s3.meta  # s3fs's own client: the endpoint and region it resolved
        endpoint, region = str(meta.endpoint_url), meta.region_name or "us-east-1"
        # A custom endpoint (AWS itself stays on s3fs: LazyFastS3): path style, as botocore
        # addresses one.
        config: dict[str, Any] = {
            "region": region,
            "endpoint": endpoint,
            "virtual_hosted_style_request": False,
        }
        provider: _S3fsCredentials | None = None
        if getattr(fs, "anon", False):
            config["skip_signature"] = True
        else:
            provider = _S3fsCredentials(fs)
            try:
                provider()
            except StoreError as exc:
                raise StoreError(f"s3://{bucket}: {exc}") from None
        timeout = envs.S3_READ_TIMEOUT.get()
        self.store: S3Store = S3Store(
            bucket,
            config=config,  # type: ignore[arg-type]  # the keys above are S3Config's
            client_options={
                "allow_http": endpoint.startswith("http://"),
                "connect_timeout": timedelta(seconds=5),  # s3fs's, backends.s3_options
                "read_timeout": timedelta(seconds=timeout),  # per read: a stalled body
                "timeout": timedelta(days=1),  # a whole body may take long; stalls end above
            },
            retry_config={"max_retries": 0},
            credential_provider=provider,
        )

    def _retried(
        self,
        request: Callable[[], T],
        what: str,
        failures: list[int],
        before_retry: Callable[[], None] | None = None,
    ) -> T:
        """``request()`` through the one retry policy (:func:`~.retry.retried`), its faults told
        apart by :func:`fault_of`; ``failures`` holds the faults met so far by this read (one
        budget of :data:`~.retry.ATTEMPTS` attempts for all the requests of one streamed
        object); ``before_retry`` drops what a broken request left.

        Raises:
            FileNotFoundError: no such object. StoreError: a fault that is not transient (one
                line naming ``what``, the object's ``s3://`` URL), or one that outlasted the
                attempts.
        """

        def attempt() -> T:
            try:
                return request()
            except FileNotFoundError:
                raise
            except Exception as exc:
                reason, transient = fault_of(exc)
                if not transient:
                    raise StoreError(f"{what}: {reason}") from None
                raise retry.Failing(retry.Fault(reason)) from exc

        return retry.retried(attempt, what, spent=failures, before_retry=before_retry)

    def read_range(self, key: str, start: int, end: int, what: str) -> memoryview:
        """Bytes ``[start, end)`` of ``key`` (fewer if it is shorter), one ranged GET retried
        as a whole, obstore's buffer without a copy.

        Raises:
            FileNotFoundError: no such object. StoreError: as :meth:`_retried`.
        """
        import obstore

        return memoryview(
            self._retried(
                lambda: obstore.get_range(self.store, key, start=start, end=end), what, [0]
            )
        )

    def open_stream(self, key: str, size: int | None, what: str) -> StreamedGet:
        """A stream of the ``size``-byte object ``key`` (its size from a HEAD; None: from the
        GET's own answer) from one GET.

        Raises:
            FileNotFoundError: no such object. StoreError: as :meth:`_retried`.
        """
        return StreamedGet(self, key, size, what)


class StreamedGet:
    """A binary stream of one object from one streaming GET, handed on as its bytes arrive; a
    body that breaks is asked for again from the first byte not yet handed on (a GET of
    ``bytes=<offset>-``), each retry said. All requests of one stream share one budget of
    :data:`~.retry.ATTEMPTS` attempts, as a body that keeps breaking is one failing read.

    Raises (from the constructor and :meth:`read`):
        FileNotFoundError: no such object. StoreError: as :meth:`FastS3._retried`.
    """

    def __init__(self, client: FastS3, key: str, size: int | None, what: str) -> None:
        self._client, self._key, self._size, self._what = client, key, size, what
        self._at = 0
        self._failures = [0]
        self._view = memoryview(b"")
        self._chunks: Iterator[bytes] | None = self._client._retried(
            self._open, what, self._failures
        )

    def _open(self) -> Iterator[bytes]:
        import obstore

        options: Any = {"range": {"offset": self._at}} if self._at else None
        result = obstore.get(self._client.store, self._key, options=options)
        if self._size is None:  # the first GET (of the whole object) tells its size
            self._size = int(result.meta["size"])
        return iter(result.stream(min_chunk_size=STREAM_CHUNK))

    def _next_chunk(self) -> bytes:
        def attempt() -> bytes:
            if self._chunks is None:  # the body broke: ask again from the first byte not had
                if self._size is not None and self._at >= self._size:
                    return b""  # every byte the HEAD promised came; nothing to ask for
                self._chunks = self._open()
            return next(self._chunks, b"")

        def drop() -> None:
            self._chunks = None

        return self._client._retried(attempt, self._what, self._failures, drop)

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all of the current chunk when ``n`` < 0); b"" at the end."""
        if not self._view:
            chunk = self._next_chunk()
            if not chunk:
                return b""
            self._view = memoryview(chunk)
        n = len(self._view) if n < 0 else n
        out, self._view = self._view[:n], self._view[n:]
        self._at += len(out)
        return bytes(out)

    def close(self) -> None:
        """Drop the rest of the body (its connection is not reused)."""
        self._chunks = iter(())
        self._view = memoryview(b"")

    def __enter__(self) -> StreamedGet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LazyFastS3:
    """A :class:`FastS3` made on first use, once, whichever thread asks first; None where
    obstore is not installed, and on AWS's own endpoints: there botocore follows S3's redirect
    to a bucket's region (a bucket outside the configured region answers 301), which obstore
    does not, so blob GETs stay on s3fs until the bucket's region is resolved the same way.
    Holds no client while pickled (a Ray task makes its own)."""

    def __init__(self, fs: Any, bucket: str) -> None:
        self._fs, self._bucket = fs, bucket
        self._client: FastS3 | None = None
        self._lock = threading.Lock()

    def get(self) -> FastS3 | None:
        """The client, made now if it is not yet (None: obstore is not installed).

        Raises:
            StoreError: it cannot be set up.
        """
        if self._client is None:
            if not obstore_installed() or _is_aws(str(self._fs.s3.meta.endpoint_url)):
                return None
            with self._lock:
                if self._client is None:
                    try:
                        self._client = FastS3(self._fs, self._bucket)
                    except StoreError:
                        raise
                    except Exception as exc:
                        raise StoreError(
                            f"s3://{self._bucket}: cannot set up its S3 client for blobs: "
                            f"{type(exc).__name__}: {retry.one_line(str(exc))}"
                        ) from None
        return self._client

    def __getstate__(self) -> dict[str, Any]:
        return {"_fs": self._fs, "_bucket": self._bucket}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_fs"], state["_bucket"])  # type: ignore[misc]
