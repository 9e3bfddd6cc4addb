"""An HTTP proxy on loopback that answers some requests with 500 instead of forwarding them:
faults between neuronbuild and the S3 server, for tests."""

from __future__ import annotations

import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def relay(handler: BaseHTTPRequestHandler, response: http.client.HTTPResponse, data: bytes) -> None:
    """Answer ``handler``'s request with the upstream ``response`` whose body was ``data``."""
    handler.send_response(response.status)
    head = handler.command == "HEAD"  # its Content-Length is the object's, not ours
    for key, value in response.getheaders():
        skip = ("transfer-encoding", "connection") + (() if head else ("content-length",))
        if key.lower() not in skip:
            handler.send_header(key, value)
    if not head:
        handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    if not head:
        handler.wfile.write(data)


class FaultyProxy:
    """Forward to ``127.0.0.1:target_port``; fail every ``fail_every``-th request with 500
    (0: never), or every request while ``down`` is set; hold every ``stall_every``-th request for
    ``stall_seconds`` before forwarding it (a timeout for a client that waits less); cut every
    ``cut_every``-th GET answered 200 or 206 after half its body (the connection drops mid-body)."""

    def __init__(
        self,
        target_port: int,
        fail_every: int = 0,
        stall_every: int = 0,
        stall_seconds: float = 0,
        cut_every: int = 0,
    ) -> None:
        self.target_port, self.fail_every = target_port, fail_every
        self.stall_every, self.stall_seconds = stall_every, stall_seconds
        self.cut_every = cut_every
        self.down = False
        self.requests = self.failed = self.stalled = self.cut = self.gets = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # answers botocore's "Expect: 100-continue"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    proxy.requests += 1
                    fail = proxy.down or (
                        proxy.fail_every and proxy.requests % proxy.fail_every == 0
                    )
                    proxy.failed += bool(fail)
                    stall = bool(proxy.stall_every and proxy.requests % proxy.stall_every == 0)
                    proxy.stalled += stall
                if stall:
                    time.sleep(proxy.stall_seconds)
                    return  # the client has given up on this request
                if fail:
                    payload = (
                        b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
                    )
                    self.send_response(500)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":  # a body after HEAD breaks the connection
                        self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.target_port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = f"127.0.0.1:{proxy.target_port}"
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                conn.close()
                cut = False
                if self.command == "GET" and response.status in (200, 206) and len(data) > 1:
                    with proxy._lock:
                        proxy.gets += 1
                        cut = bool(proxy.cut_every and proxy.gets % proxy.cut_every == 0)
                        proxy.cut += cut
                if cut:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                relay(self, response, data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
