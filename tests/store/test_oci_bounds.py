"""A registry that never ends an answer (issue 43 item 8): a tag list paging without end, and a
body trickled a byte at a time, each end in one line of bad store data (exit 2) within the
bounds the client states, against a hostile registry on loopback (the limits made small)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store.oci import BlobReader
from neuronbuild.transports import oci_registry
from neuronbuild.transports.oci_registry import Registry, parse_registry_url

DIGEST = "sha256:" + "ab" * 32


class Hostile(BaseHTTPRequestHandler):
    """Every tag page names ten new tags and a next page; every manifest or blob body promises
    100 bytes and sends one every 0.2 s."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if "/tags/list" in self.path:
            page = int(self.path.rpartition("page=")[2]) if "page=" in self.path else 0
            body = json.dumps({"tags": [f"t{page}-{i}" for i in range(10)]}).encode()
            self.send_response(200)
            self.send_header("Link", f'</v2/team/cache/tags/list?page={page + 1}>; rel="next"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200)
        self.send_header("Content-Length", "100")
        self.end_headers()
        try:
            for _ in range(100):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:  # the client gave up
            pass


@pytest.fixture
def hostile() -> Iterator[Registry]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Registry(parse_registry_url(f"oci+http://127.0.0.1:{server.server_port}/team/cache"))
    server.shutdown()
    server.server_close()


def test_a_tag_list_paging_without_end_stops_at_its_tag_limit(
    hostile: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oci_registry, "MAX_TAGS", 50)
    with pytest.raises(StoreDataInvalid) as raised:
        hostile.tags()
    message = str(raised.value)
    assert "\n" not in message and "the tag list runs past 60 tags in 6 pages" in message


def test_a_tag_list_paging_without_end_stops_at_its_time_limit(
    hostile: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(oci_registry, "LIST_SECONDS", 0.5)
    started = time.monotonic()
    with pytest.raises(StoreDataInvalid, match="a registry paging without end"):
        hostile.tags()
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("what", ["manifest", "blob"])
def test_a_body_trickled_a_byte_at_a_time_ends_at_its_deadline(
    hostile: Registry, monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """Each byte comes well within the read timeout (30 s), so only the whole body's deadline
    can end it: 1 s here (any size at a high rate), for a body that would take 20 s."""
    monkeypatch.setattr(oci_registry, "BODY_SECONDS", 1.0)
    monkeypatch.setattr(oci_registry, "MIN_BODY_RATE", 1 << 40)
    started = time.monotonic()
    with pytest.raises(StoreDataInvalid) as raised:
        if what == "manifest":
            hostile.get_manifest("latest")
        else:
            with BlobReader(hostile, DIGEST) as blob:
                while blob.read(1 << 20):
                    pass
    message = str(raised.value)
    assert "\n" not in message and "the body arrives too slowly" in message, message
    assert time.monotonic() - started < 5
