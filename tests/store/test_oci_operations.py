"""A registry store works with the operations the registry offers (issue 46 items 1 and 2):
against the distribution registry with deletes switched off (its default configuration; GHCR
and Docker Hub allow none either), a compile's probe and the store's clock need no delete and
leave one probe tag at most, a dry run writes nothing, and what does need a delete (gc) says
which setting in one line (exit 2); a repository whose tags are immutable (ECR) is named as such,
with the fix, not retried as a fault."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from neuronbuild.errors import Unsupported, UserError
from neuronbuild.store.cas import Store, store_now
from neuronbuild.store.leases import Leases
from neuronbuild.transports.oci_registry import Registry, parse_registry_url
from tests.lib.registry import INSTALL_HINT, registry, registry_binary


@pytest.fixture(scope="module")
def no_deletes() -> Iterator[str]:
    if registry_binary() is None:
        pytest.fail(INSTALL_HINT)
    with registry(deletes=False) as server:
        yield f"oci+http://{server.host}"


def test_the_probe_and_the_clock_need_no_delete_and_leave_one_tag(no_deletes: str) -> None:
    store = Store(f"{no_deletes}/probe")
    registry_client = Registry(parse_registry_url(store.url))
    for _ in range(3):
        store.check_writable()
        assert store_now(store) > 0
    assert len(registry_client.tags()) == 1  # the one probe tag, written again by each


def test_a_dry_run_writes_nothing_to_a_registry(no_deletes: str) -> None:
    store = Store(f"{no_deletes}/dry")
    store.check_writable(leave_nothing=True)
    assert Registry(parse_registry_url(store.url)).tags() == []


def test_a_delete_the_registry_refuses_names_the_setting_in_one_line(no_deletes: str) -> None:
    store = Store(f"{no_deletes}/gc")
    store.check_writable()
    assert len(Registry(parse_registry_url(store.url)).tags()) == 1
    with pytest.raises(Unsupported) as raised:
        store.backend.delete(store.layout.tmp("probe"))
    message = str(raised.value)
    assert isinstance(raised.value, UserError)  # exit 2: retrying cannot change it
    assert "\n" not in message and "HTTP 405" in message, message
    assert "the registry refuses deletes" in message and "storage.delete.enabled: true" in message


def test_a_lease_released_where_deletes_are_refused_is_left_to_expire(no_deletes: str) -> None:
    store = Store(f"{no_deletes}/leases")
    key = "sha256:" + "1" * 64
    builder = Leases(store)
    lease = builder.take(key)
    assert lease is not None
    lease.release()  # the delete is refused (405): no error, the lease expires by its time
    assert Leases(store).holder(key) == builder.owner


class Immutable(BaseHTTPRequestHandler):
    """Answers every manifest PUT as ECR does on a repository with immutable tags."""

    def log_message(self, *args: object) -> None:
        pass

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps(
            {
                "errors": [
                    {
                        "code": "TAG_INVALID",
                        "message": "The image tag 'x' already exists in the 'team/cache' "
                        "repository and cannot be overwritten because the repository is "
                        "immutable.",
                    }
                ]
            }
        ).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_an_immutable_tag_is_named_with_its_fix_not_retried() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Immutable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = Registry(parse_registry_url(f"oci+http://127.0.0.1:{server.server_port}/t/c"))
        with pytest.raises(Unsupported) as raised:
            client.put_manifest("x", b"{}")
    finally:
        server.shutdown()
        server.server_close()
    message = str(raised.value)
    assert "\n" not in message and "tag x: the repository's tags are immutable" in message
    assert "--image-tag-mutability MUTABLE" in message, message
