"""An HTTP proxy on loopback that injects the faults met between neuronbuild and an S3 server,
for tests: answers of 500 instead of forwarding, stalls, bodies cut short or corrupted, and
writes whose answer is lost (the connection reset after the server applied them)."""

from __future__ import annotations

import http.client
import socket
import struct
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
    ``cut_every``-th GET answered 200 or 206 after half its body (the connection drops mid-body,
    its Content-Length promised); flip the last byte of every ``corrupt_every``-th such body,
    headers (its checksum among them) unchanged. ``body_path``: only GETs whose path and query
    contain it are cut or corrupted (e.g. ``/blobs/``, or ``list-type`` for listings).

    ``lose_ack``: the first ``lose_acks`` PUTs whose path contains it reach the server, then
    their connection is reset before the answer (the write landed, its acknowledgement never
    arrives); ``acks_lost`` lists their paths. ``then_fail``: ``(methods, path part)``, e.g.
    ``("PUT", "/refs/")``: once an acknowledgement was lost, every request of one of those
    methods whose path contains that part is answered 500.

    For registries: ``max_cuts`` ends the cutting after that many bodies (0: never ends);
    ``ignore_range`` forwards GETs without their ``Range`` (the whole body, 200, as a server
    that ignores ranges answers); ``repeat_link``: GETs whose path contains it are answered
    with a ``Link`` header naming that same path as the next page; ``corrupt_uploads``: the last
    byte of every PUT body whose path contains it is flipped on the way; ``listen``: the
    address to listen on (``::1`` for IPv6); ``max_body``: a PUT or PATCH whose body is larger
    (bytes) is answered 413, as nginx answers past its ``client_max_body_size``, unforwarded;
    ``bodies`` lists each forwarded PUT's and PATCH's method and body length, ``too_large``
    counts those refused; ``throttle``: the first that many requests are answered 429 with
    ``Retry-After: retry_after``, unforwarded (``throttled`` counts them)."""

    def __init__(
        self,
        target_port: int,
        fail_every: int = 0,
        stall_every: int = 0,
        stall_seconds: float = 0,
        cut_every: int = 0,
        corrupt_every: int = 0,
        lose_ack: str | None = None,
        lose_acks: int = 1,
        body_path: str = "",
        then_fail: tuple[str, str] | None = None,
        max_cuts: int = 0,
        ignore_range: bool = False,
        repeat_link: str | None = None,
        corrupt_uploads: str | None = None,
        listen: str = "127.0.0.1",
        max_body: int = 0,
        throttle: int = 0,
        retry_after: str = "",
    ) -> None:
        self.max_body = max_body
        self.throttle, self.retry_after, self.throttled = throttle, retry_after, 0
        self.bodies: list[tuple[str, int]] = []
        self.max_cuts, self.ignore_range, self.repeat_link = max_cuts, ignore_range, repeat_link
        self.corrupt_uploads = corrupt_uploads
        self.target_port, self.fail_every = target_port, fail_every
        self.stall_every, self.stall_seconds = stall_every, stall_seconds
        self.cut_every, self.corrupt_every = cut_every, corrupt_every
        self.lose_ack, self.lose_acks, self.body_path = lose_ack, lose_acks, body_path
        self.then_fail = then_fail
        self.acks_lost: list[str] = []
        self.agents: list[tuple[str, str, str]] = []
        """Every request's method, path (with its query) and User-Agent, in arrival order."""
        self.down = False
        self.too_large = 0
        self.requests = self.failed = self.stalled = self.cut = self.gets = self.corrupted = 0
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
                    agent = self.headers.get("User-Agent") or ""
                    proxy.agents.append((self.command, self.path, agent))
                    fail = proxy.down or (
                        proxy.fail_every and proxy.requests % proxy.fail_every == 0
                    )
                    if proxy.then_fail and proxy.acks_lost:
                        methods, part = proxy.then_fail
                        fail = fail or (self.command in methods.split() and part in self.path)
                    proxy.failed += bool(fail)
                    stall = bool(proxy.stall_every and proxy.requests % proxy.stall_every == 0)
                    proxy.stalled += stall
                if stall:
                    time.sleep(proxy.stall_seconds)
                    return  # the client has given up on this request
                with proxy._lock:
                    throttled = proxy.throttled < proxy.throttle
                    proxy.throttled += throttled
                if throttled:  # 429 Too Many Requests, with the wait the registry asks for
                    payload = b'{"errors": [{"code": "TOOMANYREQUESTS", "message": "slow down"}]}'
                    self.send_response(429)
                    self.send_header("Retry-After", proxy.retry_after)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                if self.command in ("PUT", "PATCH"):
                    if proxy.max_body and length > proxy.max_body:
                        payload = b"<html><center><h1>413 Request Entity Too Large</h1></center>"
                        self.send_response(413)
                        self.send_header("Content-Type", "text/html")
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        self.wfile.write(payload)
                        with proxy._lock:
                            proxy.too_large += 1
                        return
                    with proxy._lock:
                        proxy.bodies.append((self.command, length))
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
                dropped = ("host", "range") if proxy.ignore_range else ("host",)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in dropped}
                uploads = proxy.corrupt_uploads
                if self.command == "PUT" and body and uploads and uploads in self.path:
                    body = body[:-1] + bytes([body[-1] ^ 0xFF])
                headers["Host"] = f"127.0.0.1:{proxy.target_port}"
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                conn.close()
                if self._loses_ack():
                    self._reset()
                    return
                cut = corrupt = False
                body_fault = self.command == "GET" and proxy.body_path in self.path
                if body_fault and response.status in (200, 206) and len(data) > 1:
                    with proxy._lock:
                        proxy.gets += 1
                        cut = bool(proxy.cut_every and proxy.gets % proxy.cut_every == 0)
                        cut = cut and not (proxy.max_cuts and proxy.cut >= proxy.max_cuts)
                        proxy.cut += cut
                        corrupt = bool(
                            proxy.corrupt_every and proxy.gets % proxy.corrupt_every == 0
                        )
                        proxy.corrupted += corrupt
                if corrupt:
                    data = data[:-1] + bytes([data[-1] ^ 0xFF])
                if cut:  # the upstream's status and headers (a 206's Content-Range), half a body
                    self.send_response(response.status)
                    for key, value in response.getheaders():
                        if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                location = response.headers.get("Location", "")
                upstream = f"127.0.0.1:{proxy.target_port}"
                if upstream in location:  # a registry's upload session: through us too
                    mine = self.headers.get("Host") or f"127.0.0.1:{proxy.port}"
                    response.headers.replace_header("Location", location.replace(upstream, mine))
                if proxy.repeat_link and proxy.repeat_link in self.path:
                    response.headers.add_header("Link", f'<{self.path}>; rel="next"')
                relay(self, response, data)

            def _loses_ack(self) -> bool:
                if self.command != "PUT" or proxy.lose_ack is None:
                    return False
                with proxy._lock:
                    lose = proxy.lose_ack in self.path and len(proxy.acks_lost) < proxy.lose_acks
                    if lose:
                        proxy.acks_lost.append(self.path)
                return lose

            def _reset(self) -> None:
                """Close the client's connection with a TCP reset, nothing answered."""
                linger = struct.pack("ii", 1, 0)  # SO_LINGER, 0 s: close sends RST
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                self.close_connection = True

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = do_PATCH = _handle

        server_class = ThreadingHTTPServer
        if ":" in listen:

            class Server6(ThreadingHTTPServer):
                address_family = socket.AF_INET6

            server_class = Server6
        self.server = server_class((listen, 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FaultyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
