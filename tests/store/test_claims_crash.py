"""A publisher killed at any point leaves a store a reader can trust, and a rerun completes it.

The publish (blobs, unit records, manifest, ref move, as ``compile`` does after its engine ran)
runs in a forked child that dies without cleanup (``os._exit``, or SIGKILL) at the k-th store
request, for every k of that publish, on a fresh store each round:

- folders: at the k-th call of a backend primitive, or the k-th step inside one (a data write,
  which lands half of its bytes first; an fsync; a rename or link);
- S3 (moto on loopback): right after the k-th HTTP request reached the server, before its answer.

After each death every blob hashes to its name, every unit record and manifest parses and has
all it names, the ref points at a complete manifest at the end of an unbroken history chain
(:func:`tests.lib.claims.audit`), and a rerun publishes the build and moves the ref.
"""

from __future__ import annotations

import builtins
import http.client
import os
import signal
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.store.cas import Store
from neuronbuild.transports import backends
from tests.lib.builders import publish_units
from tests.lib.claims import audit, check_chain, fresh_url, s3_root, small_recipe
from tests.lib.faulty_proxy import relay

__all__ = ["s3_root"]

PRIMITIVES = (
    "read_versioned",
    "size",
    "exists",
    "find",
    "list_sizes",
    "open_read",
    "delete",
    "put",
    "create",
    "put_file",
    "swap",
    "move_in",
)


def in_child(body: Callable[[], None]) -> tuple[int, int]:
    """Run ``body`` in a forked child; its pid and wait status (exit 0: it finished)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            body()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return pid, status


def die() -> None:
    os._exit(137)


def arm_folder_crash(k: int) -> None:
    """In the child: die at the k-th primitive call or step inside one."""
    count = [0]

    def event() -> bool:
        count[0] += 1
        return count[0] == k

    for name in PRIMITIVES:
        for cls in (backends.Backend, backends.FolderBackend):
            if name in vars(cls):
                real = vars(cls)[name]

                def wrapper(*a: Any, _real: Any = real, **kw: Any) -> Any:
                    if event():
                        die()
                    return _real(*a, **kw)

                setattr(cls, name, wrapper)
    for name in ("replace", "link", "fsync"):
        real_os = getattr(os, name)

        def step(*a: Any, _real: Any = real_os, **kw: Any) -> Any:
            if event():
                die()
            return _real(*a, **kw)

        setattr(os, name, step)
    real_open = builtins.open

    def open_(file: Any, mode: str = "r", *a: Any, **kw: Any) -> Any:
        f = real_open(file, mode, *a, **kw)
        if "w" in mode or "x" in mode:
            real_write = f.write

            def write(data: bytes) -> int:
                if event():
                    real_write(data[: len(data) // 2])
                    f.flush()
                    die()
                return real_write(data)

            f.write = write
        return f

    backends.open = open_  # type: ignore[attr-defined]


def recipes(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The build already published and the one the publisher dies publishing (other keys)."""
    return small_recipe(tmp_path), {**small_recipe(tmp_path), "seed": 1}


def check_round(url: str, tmp_path: Path, first: str, second: dict[str, Any]) -> None:
    store = Store(url)
    assert audit(store) == [], url
    assert store.get_ref("claims", "latest") in (first, None) or store.has_manifest(
        store.get_ref("claims", "latest") or ""
    )
    digest = publish_units(store, second, tmp_path, "b")  # the rerun
    assert store.get_ref("claims", "latest") == digest != first
    assert audit(store) == []
    check_chain(store, "claims", "latest", moves=2, off_chain=1)


def test_a_folder_publisher_killed_at_every_step_leaves_a_consistent_store(
    tmp_path: Path,
) -> None:
    first_recipe, second = recipes(tmp_path)
    k = 0
    while True:
        k += 1
        assert k < 500, "the publish never completed"
        url = fresh_url("folder", tmp_path, None)
        first = publish_units(Store(url), first_recipe, tmp_path, "a")

        def publish(k: int = k, url: str = url) -> None:
            arm_folder_crash(k)
            publish_units(Store(url), second, tmp_path, "b")

        _, status = in_child(publish)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            break  # k is past the last step: every earlier one was a crash point
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 137, status
        check_round(url, tmp_path, first, second)
    print(f"{k - 1} crash points")
    assert k > 20  # blobs, records, manifest, history and ref each took steps


class KillingProxy:
    """Forwards HTTP to ``127.0.0.1:target``; after forwarding the ``kill_at``-th request it
    SIGKILLs ``victim`` before answering."""

    def __init__(self, target: int) -> None:
        self.target, self.kill_at, self.victim = target, 0, 0
        self.requests = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                conn = http.client.HTTPConnection("127.0.0.1", proxy.target, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                conn.close()
                with proxy.lock:
                    proxy.requests += 1
                    kill = proxy.victim and proxy.requests == proxy.kill_at
                if kill:
                    os.kill(proxy.victim, signal.SIGKILL)
                    self.close_connection = True
                    return
                relay(self, response, data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # the killed client's half-open connections

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def killing_proxy(s3_root: str) -> Iterator[KillingProxy]:
    proxy = KillingProxy(int(os.environ["AWS_ENDPOINT_URL"].rsplit(":", 1)[1]))
    yield proxy
    proxy.close()


def publish_through(
    proxy: KillingProxy, url: str, recipe: dict[str, Any], tmp_path: Path, kill_at: int
) -> tuple[int, int]:
    """Publish in a forked child whose S3 requests go through ``proxy``; the child waits until
    the proxy knows its pid."""
    read, write = os.pipe()
    proxy.requests, proxy.kill_at, proxy.victim = 0, kill_at, 0

    def publish() -> None:
        os.close(write)
        os.read(read, 1)
        os.environ["AWS_ENDPOINT_URL"] = f"http://127.0.0.1:{proxy.port}"
        publish_units(Store(url), recipe, tmp_path, "b")

    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            publish()
        except BaseException:
            code = 1
        os._exit(code)
    os.close(read)
    proxy.victim = pid
    os.write(write, b"go")
    os.close(write)
    _, status = os.waitpid(pid, 0)
    proxy.victim = 0
    return pid, status


@pytest.mark.slow
def test_an_s3_publisher_killed_after_every_request_leaves_a_consistent_store(
    killing_proxy: KillingProxy, s3_root: str, tmp_path: Path
) -> None:
    first_recipe, second = recipes(tmp_path)
    url = fresh_url("s3", tmp_path, s3_root)
    publish_units(Store(url), first_recipe, tmp_path, "a")
    _, status = publish_through(killing_proxy, url, second, tmp_path, kill_at=0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    total = killing_proxy.requests
    assert total > 10
    for k in range(1, total + 1):
        url = fresh_url("s3", tmp_path, s3_root)
        first = publish_units(Store(url), first_recipe, tmp_path, "a")
        _, status = publish_through(killing_proxy, url, second, tmp_path, kill_at=k)
        assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 0, (k, status)
        check_round(url, tmp_path, first, second)
