"""A registry that misbehaves, between neuronbuild and a real one (the CNCF distribution
registry on loopback, behind tests/lib/faulty_proxy.py): bodies cut short mid-way are retried
like failed requests, a range ignored never splices bytes, a tag list that links to itself
ends, a stalled ping is retried, a lost upload answer gets a new upload session, an upload
refused for bytes we sent right is not called hostile, malformed credential files are one line,
and an IPv6 registry works. Each fault ends in the store's error map: one line, exit 2 or 3."""

from __future__ import annotations

import base64
import json
import os
import uuid
from pathlib import Path

import pytest

from neuronbuild.digest import sha256_digest
from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.notices import set_retry_listener
from neuronbuild.store.cas import Store
from neuronbuild.store.oci import BlobReader
from neuronbuild.transports import oci_registry
from neuronbuild.transports.oci_registry import Registry, parse_registry_url, read_credentials
from tests.lib.builders import publish_build
from tests.lib.commands import neuronbuild
from tests.lib.faulty_proxy import FaultyProxy
from tests.lib.registry import registry_root
from tests.store.test_oci import demo_recipe, fast_retries, oci_url, proxied, registry_port

__all__ = ["fast_retries", "oci_url", "registry_root"]  # the fixtures this module uses


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("part", ["/manifests/", "/tags/list", "/blobs/"])
@pytest.mark.slow
def test_a_body_cut_short_is_retried_and_the_read_goes_through(
    oci_url: str, tmp_path: Path, fast_retries: list[str], part: str
) -> None:
    digest = publish_build(Store(oci_url), demo_recipe(tmp_path), tmp_path, "a")
    with FaultyProxy(registry_port(oci_url), cut_every=2, body_path=part) as proxy:
        store = Store(proxied(oci_url, proxy))
        assert store.get_ref("remote-demo", "latest") == digest
        manifest = store.get_manifest(digest)
        assert "remote-demo/latest" in store.refs()
        for file in manifest.files():
            assert store.check_blob(file) is None
        assert proxy.cut > 0
    assert fast_retries


@pytest.mark.parametrize("part", ["/manifests/", "/tags/list"])
@pytest.mark.slow
def test_bodies_that_always_break_are_one_store_error(
    oci_url: str, tmp_path: Path, fast_retries: list[str], part: str
) -> None:
    publish_build(Store(oci_url), demo_recipe(tmp_path), tmp_path, "a")
    proxy = FaultyProxy(registry_port(oci_url), cut_every=1, body_path=part)
    with proxy, pytest.raises(StoreError, match="tried 5 times") as raised:
        Store(proxied(oci_url, proxy)).get_ref("remote-demo", "latest")
    assert "\n" not in str(raised.value)
    assert len(fast_retries) >= 4


def test_a_resumed_read_from_a_registry_that_ignores_range_is_the_blob(
    oci_url: str, fast_retries: list[str]
) -> None:
    data = os.urandom(3 << 20)
    digest = sha256_digest(data)
    Registry(parse_registry_url(oci_url)).upload_blob(
        digest, len(data), oci_registry.bytes_body(data)
    )
    with FaultyProxy(
        registry_port(oci_url), cut_every=1, max_cuts=1, body_path="/blobs/", ignore_range=True
    ) as proxy:
        registry = Registry(parse_registry_url(proxied(oci_url, proxy)))
        with BlobReader(registry, digest) as reader:
            got = b"".join(iter(lambda: reader.read(1 << 16), b""))
        assert proxy.cut == 1
    assert len(fast_retries) == 1
    assert got == data


@pytest.mark.slow
def test_a_tag_list_that_links_to_itself_ends(oci_url: str, tmp_path: Path) -> None:
    publish_build(Store(oci_url), demo_recipe(tmp_path), tmp_path, "a")
    with FaultyProxy(registry_port(oci_url), repeat_link="/tags/list") as proxy:
        result = neuronbuild("ls", "--cache", proxied(oci_url, proxy), timeout=60)  # no loop
    assert result.returncode == 0, result.stderr[-3000:]
    assert "remote-demo/latest" in result.stdout


@pytest.mark.slow
def test_a_ping_that_times_out_is_retried_then_one_store_error(
    oci_url: str, monkeypatch: pytest.MonkeyPatch, fast_retries: list[str]
) -> None:
    monkeypatch.setattr(oci_registry, "READ_SECONDS", 0.3)
    proxy = FaultyProxy(registry_port(oci_url), stall_every=1, stall_seconds=1.0)
    with proxy, pytest.raises(StoreError, match="tried") as raised:
        Store(proxied(oci_url, proxy))
    assert "\n" not in str(raised.value)
    assert len(fast_retries) >= 1


def test_an_upload_whose_answer_is_lost_is_sent_again_in_a_new_session(
    oci_url: str, tmp_path: Path, fast_retries: list[str]
) -> None:
    local = tmp_path / "blob"
    local.write_bytes(os.urandom(1 << 20))
    digest = sha256_digest(local.read_bytes())
    with FaultyProxy(registry_port(oci_url), lose_ack="/blobs/uploads/") as proxy:
        store = Store(proxied(oci_url, proxy))
        store.backend.put_file(local, store.layout.blob(digest))
        assert proxy.acks_lost
    sessions = [p for m, p, _ in proxy.agents if m == "POST" and "/blobs/uploads/" in p]
    assert len(sessions) == 2, sessions
    assert Registry(parse_registry_url(oci_url)).blob_size(digest) == 1 << 20


def test_an_upload_refused_for_bytes_sent_right_is_a_store_error_not_bad_data(
    oci_url: str, tmp_path: Path, fast_retries: list[str]
) -> None:
    data = os.urandom(1 << 16)
    digest = sha256_digest(data)
    local = tmp_path / "blob"
    local.write_bytes(data)
    with FaultyProxy(registry_port(oci_url), corrupt_uploads="/blobs/uploads/") as proxy:
        store = Store(proxied(oci_url, proxy))
        path = store.layout.blob(digest)
        for write in (
            lambda: store.backend.put(path, data),
            lambda: store.backend.put_file(local, path),
        ):
            with pytest.raises(StoreError) as raised:
                write()
            assert not isinstance(raised.value, StoreDataInvalid), raised.value
            assert "DIGEST_INVALID" in str(raised.value) and "hash" in str(raised.value)
        wrong = os.urandom(1 << 16)  # bytes that really are not the digest's: bad data, exit 2
    direct = Store(oci_url)
    with pytest.raises(StoreDataInvalid, match="do not hash"):
        direct.backend.put(direct.layout.blob(digest), wrong)


def test_a_registry_that_refuses_large_bodies_gets_blobs_in_chunks(
    oci_url: str, tmp_path: Path
) -> None:
    """Behind nginx's default ``client_max_body_size 1m``, a 3 MiB blob's whole PUT is
    refused (413) and so is its first chunk of half that; chunks of 768 KiB go through, and
    the next blob goes in chunks at once."""
    limit = 1 << 20
    first, second = os.urandom(3 << 20), os.urandom(2 << 20)
    local = tmp_path / "blob"
    local.write_bytes(first)
    counted: list[int] = []
    with FaultyProxy(registry_port(oci_url), max_body=limit) as proxy:
        store = Store(proxied(oci_url, proxy))
        store.backend.put_file(local, store.layout.blob(sha256_digest(first)), counted.append)
        store.backend.put(store.layout.blob(sha256_digest(second)), second)
    assert proxy.too_large == 2
    # The refused bodies' bytes are taken back: progress never passes what was stored.
    running = [sum(counted[: i + 1]) for i in range(len(counted))]
    assert running[-1] == len(first) and min(running) >= 0, running[-1]
    assert max(running[running.index(len(first)) :]) == len(first)
    chunks = [n for method, n in proxy.bodies if method == "PATCH"]
    assert chunks == [768 << 10] * 4 + [768 << 10] * 2 + [512 << 10], chunks
    assert [n for method, n in proxy.bodies if method == "PUT"] == [0, 0]
    registry = Registry(parse_registry_url(oci_url))
    for data in (first, second):
        assert registry.read_blob(sha256_digest(data), len(data) + 1) == data


def test_a_limit_between_two_halvings_is_passed_by_the_smallest_chunk(
    oci_url: str, tmp_path: Path
) -> None:
    """Issue 46 item 4: a 998,620-byte blob behind a 300 KiB body limit; halving from its size
    skips from 499,310 bytes to below the 256 KiB floor, which passes and is tried."""
    data = os.urandom(998_620)
    with FaultyProxy(registry_port(oci_url), max_body=300 << 10) as proxy:
        store = Store(proxied(oci_url, proxy))
        store.backend.put(store.layout.blob(sha256_digest(data)), data)
    assert [n for method, n in proxy.bodies if method == "PATCH"] == [256 << 10] * 3 + [212188]
    registry = Registry(parse_registry_url(oci_url))
    assert registry.read_blob(sha256_digest(data), len(data) + 1) == data


def test_a_registry_that_refuses_even_small_chunks_is_one_store_error(
    oci_url: str, tmp_path: Path
) -> None:
    data = os.urandom(1 << 20)
    with FaultyProxy(registry_port(oci_url), max_body=100 << 10) as proxy:
        store = Store(proxied(oci_url, proxy))
        with pytest.raises(StoreError) as raised:
            store.backend.put(store.layout.blob(sha256_digest(data)), data)
    message = str(raised.value)
    assert "\n" not in message and "HTTP 413" in message, message
    assert "refuses even a chunk of 262144 bytes" in message and "client_max_body_size" in message
    assert Registry(parse_registry_url(oci_url)).blob_size(sha256_digest(data)) is None


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "not readable JSON"),
        ('["auths"]', "not a Docker config"),
        ('{"auths": {"reg.example": "c2VjcmV0"}}', "not a Docker config"),
        ('{"credHelpers": {"reg.example": 1}}', "not a Docker config"),
    ],
)
def test_a_malformed_credentials_file_is_one_line_naming_it(
    tmp_path: Path, content: str, expected: str
) -> None:
    docker = tmp_path / "docker"
    docker.mkdir()
    (docker / "config.json").write_text(content)
    result = neuronbuild(
        "ls", "--cache", "oci://reg.example/team/cache",
        env={"DOCKER_CONFIG": str(docker), "HOME": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert str(docker / "config.json") in line and expected in line, line


def test_credential_files_are_read_in_one_order_the_later_winning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home, docker, podman = tmp_path / "home", tmp_path / "docker", tmp_path / "auth.json"
    (home / ".docker").mkdir(parents=True)
    docker.mkdir()
    token = {
        name: base64.b64encode(f"{name}:pw".encode()).decode()
        for name in ("home", "docker", "podman")
    }
    (home / ".docker" / "config.json").write_text(
        json.dumps({"auths": {"r.example": {"auth": token["home"]}, "h.example": {"auth": "aA=="}}})
    )
    (docker / "config.json").write_text(
        json.dumps({"auths": {"r.example": {"auth": token["docker"]}}})
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("DOCKER_CONFIG", str(docker))
    assert read_credentials()["auths"]["r.example"]["auth"] == token["docker"]
    podman.write_text(json.dumps({"auths": {"r.example": {"auth": token["podman"]}}}))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(podman))
    for _ in range(5):  # ORAS's own loader went by a set's order
        auths = read_credentials()["auths"]
        assert auths["r.example"]["auth"] == token["podman"]
        assert auths["h.example"]["auth"] == "aA=="
    assert Registry(parse_registry_url("oci://r.example/team/cache")).login == token["podman"]


@pytest.mark.slow
def test_an_ipv6_registry_is_a_store(registry_root: str, tmp_path: Path) -> None:
    url = f"{registry_root}/neuronbuild/{uuid.uuid4().hex[:10]}"
    with FaultyProxy(registry_port(url), listen="::1") as proxy:
        repository = parse_registry_url(url).repository
        six = f"oci+http://[::1]:{proxy.port}/{repository}"
        digest = publish_build(Store(six), demo_recipe(tmp_path), tmp_path, "a")
        assert Store(six).get_ref("remote-demo", "latest") == digest
    assert Store(url).get_ref("remote-demo", "latest") == digest
    to = parse_registry_url(f"oci+http://[::1]:{proxy.port}/team/image:v1", "--to")
    assert (to.host, to.repository, to.tag) == (f"[::1]:{proxy.port}", "team/image", "v1")
    bare = parse_registry_url("oci://[fd00::2]/team/image", "--to")
    assert bare.host == "[fd00::2]"
    with pytest.raises(UserError, match="not a registry host"):
        parse_registry_url("oci://[::1]:99999/team/image", "--to")


@pytest.mark.slow
def test_a_registry_that_throttles_is_waited_for_as_long_as_it_asks(
    oci_url: str, fast_retries: list[str]
) -> None:
    """Issue 46 item 16: a 429 with ``Retry-After: 1`` is retried after a second, not after the
    backoff (here a hundredth of one), and the retry line says what was asked; a registry that
    asks for longer than neuronbuild waits is one line at once, exit 3."""
    waits: list[tuple[float, str]] = []
    previous = set_retry_listener(lambda attempt, attempts, s, why: waits.append((s, why)))
    try:
        # The ping's first GET (its answer unread), then two retried, then answered.
        with FaultyProxy(registry_port(oci_url), throttle=3, retry_after="1") as proxy:
            Store(proxied(oci_url, proxy))
        assert proxy.throttled == 3 and len(waits) == 2
        assert all(
            s >= 1.0 and "HTTP 429" in why and "(Retry-After: 1 s)" in why for s, why in waits
        )
        proxy = FaultyProxy(registry_port(oci_url), throttle=2, retry_after="3600")
        with proxy, pytest.raises(StoreError) as raised:
            Store(proxied(oci_url, proxy))
        message = str(raised.value)
        assert "asked to retry after 3600 s, over the 60 s neuronbuild waits" in message
        assert "\n" not in message and proxy.throttled == proxy.requests == 2
    finally:
        set_retry_listener(previous)
