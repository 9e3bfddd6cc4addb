"""moto's S3 server on 127.0.0.1 for the benchmarks: started, with the AWS variables pointing at
it and one bucket made (shared by ``s3_pull.py`` and ``shards.py``)."""

from __future__ import annotations

import logging
import os

from moto.server import ThreadedMotoServer


def start_s3(bucket: str) -> ThreadedMotoServer:
    """Start the server, point ``AWS_ENDPOINT_URL`` (and dummy credentials) at it, make
    ``bucket``; the caller stops it (``server.stop()``)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
    )
    import s3fs

    s3fs.S3FileSystem().mkdir(bucket)
    return server
