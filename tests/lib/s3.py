"""moto's S3 server on loopback for tests (as s3fs's own suite uses it): started with the
environment that points s3fs, and child processes, at it."""

from __future__ import annotations

import contextlib
import logging
import os
import re
from collections.abc import Iterator

from moto.server import ThreadedMotoServer

from tests.lib.planted import AWS_SECRET


def start_moto() -> tuple[ThreadedMotoServer, dict[str, str]]:
    """A moto S3 server on loopback, and the environment that points s3fs (and children) at it;
    the caller stops it (``server.stop()``)."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }
    return server, env


@contextlib.contextmanager
def s3_environment(env: dict[str, str]) -> Iterator[None]:
    """``env`` (a server's endpoint and keys) set in this process for the block and restored
    after, with s3fs's cached file systems dropped on both sides: they keep the endpoint they
    were made with, and none may outlive its server."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def moto_s3(bucket: str) -> Iterator[dict[str, str]]:
    """A moto S3 server on loopback holding ``bucket``, its environment set in this process too
    (and restored after, :func:`s3_environment`); yields that environment."""
    server, env = start_moto()
    try:
        with s3_environment(env):
            import s3fs

            # moto keeps its buckets in this process, across servers: it may exist already.
            s3fs.S3FileSystem(skip_instance_cache=True).makedirs(bucket, exist_ok=True)
            yield env
    finally:
        server.stop()


REQUEST_LINE = re.compile(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP/')
"""Method and path in werkzeug's request log line (``"GET /b/k HTTP/1.1" 200 -``), maybe styled."""


@contextlib.contextmanager
def s3_requests() -> Iterator[list[tuple[str, str]]]:
    """Every HTTP request a moto server of this process answers inside the block, from any
    process (a command run as a child too), as ``(method, path with query)`` in the order
    answered: read from werkzeug's request log, which moto's server writes one line a request."""
    seen: list[tuple[str, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found = REQUEST_LINE.search(record.getMessage())
            if found:
                seen.append((found[1], found[2]))

    logger, handler = logging.getLogger("werkzeug"), Keep()
    level = logger.level
    logger.addHandler(handler)  # also keeps werkzeug from adding its own stderr handler
    logger.setLevel(logging.INFO)
    try:
        yield seen
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
