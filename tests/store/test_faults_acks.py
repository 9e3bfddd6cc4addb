"""Lost acknowledgements and broken response bodies on S3 (moto's server on loopback, behind
:class:`tests.lib.faulty_proxy.FaultyProxy`), each command through the CLI edge a user's runs.

A conditional PUT that reaches the server but whose answer is lost (the connection reset after
the write) is retried by botocore and refused with 412: the write must be recognised as this
call's own, so ``tag`` and ``push`` move the ref once, say so, and record that one move. A body
cut short or failing its checksum is read again, each retry said, and ends as one line, exit 3.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from neuronbuild.transports import backends
from tests.lib.builders import published_with_model
from tests.lib.claims import check_chain
from tests.lib.commands import neuronbuild
from tests.lib.faulty_proxy import FaultyProxy
from tests.lib.s3 import moto_s3

BUCKET = "neuronbuild-acks"
RETRY = re.compile(r"retrying \([2-5]/5\) in \d+\.\d s: .+")
PROGRESS = re.compile(r"(pull|verify): ")


@pytest.fixture(scope="module")
def moto_port() -> Iterator[int]:
    """A moto S3 server holding :data:`BUCKET` for the module (its environment set here)."""
    with moto_s3(BUCKET) as env:
        yield int(env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])


@pytest.fixture
def pushed(moto_port: int, tmp_path: Path) -> tuple[Store, str, str]:
    """A CI folder store with one build of recipe ``c``, the S3 store URL it was pushed to (ref
    ``c/latest`` moved there), and the manifest's digest."""
    local, digest = published_with_model(tmp_path, name="c")
    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
    done = neuronbuild("push", "c/latest", "--from", local.url, "--cache", url)
    assert done.returncode == 0, done.stderr
    return local, url, digest


def through(proxy: FaultyProxy) -> dict[str, str]:
    """The environment of a command whose S3 requests go through ``proxy``."""
    return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}"}


def history(url: str, ref: str) -> list[dict[str, object]]:
    """``ls --history --json``'s moves of ``ref``, run as a user runs it."""
    listed = neuronbuild("ls", "--cache", url, "--history", "--json")
    assert listed.returncode == 0, listed.stderr
    moves: list[dict[str, object]] = json.loads(listed.stdout)["history"][ref]
    return moves


def error_lines(stderr: str) -> list[str]:
    """stderr's lines other than retry notices and progress."""
    lines = (line for line in stderr.splitlines() if line.strip())
    return [line for line in lines if not RETRY.fullmatch(line) and not PROGRESS.match(line)]


@pytest.mark.slow
def test_a_tag_whose_ref_write_lost_its_answer_exits_0_and_records_its_one_move(
    moto_port: int, pushed: tuple[Store, str, str]
) -> None:
    _, url, digest = pushed
    with FaultyProxy(moto_port, lose_ack="/refs/c/prod") as proxy:
        tagged = neuronbuild("tag", "c/latest", "c/prod", "--cache", url, env=through(proxy))
        assert proxy.acks_lost, "the ref's PUT never went through the proxy"
    assert tagged.returncode == 0, tagged.stderr
    assert "Traceback" not in tagged.stderr
    assert Store(url).get_ref("c", "prod") == digest
    assert [m["manifest"] for m in history(url, "c/prod")] == [digest]
    check_chain(Store(url), "c", "prod", moves=1, off_chain=0)


@pytest.mark.slow
@pytest.mark.parametrize("lost", ["/refs/", "/history/", "/manifests/", "/units/"])
def test_a_push_whose_write_lost_its_answer_publishes_and_records_the_move(
    moto_port: int, tmp_path: Path, lost: str
) -> None:
    local, digest = published_with_model(tmp_path, name="c")
    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
    with FaultyProxy(moto_port, lose_ack=lost) as proxy:
        done = neuronbuild(
            "push", "c/latest", "--from", local.url, "--cache", url, env=through(proxy)
        )
        assert proxy.acks_lost, f"no PUT under {lost} went through the proxy"
    assert done.returncode == 0, done.stderr
    store = Store(url)
    assert store.get_ref("c", "latest") == digest
    assert [m["manifest"] for m in history(url, "c/latest")] == [digest]
    check_chain(store, "c", "latest", moves=1)
    verified = neuronbuild("verify", "c/latest", "--cache", url, "--deep")
    assert verified.returncode == 0, verified.stderr


@pytest.mark.slow
def test_a_create_whose_answer_was_lost_is_reported_as_this_calls_own(
    moto_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import s3fs

    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
    Store(url, create=True)
    with FaultyProxy(moto_port, lose_ack="/units/") as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
        s3fs.S3FileSystem.clear_instance_cache()
        store = Store(url)
        path = store.layout.unit("sha256:" + "a" * 64)
        assert store.backend.create(path, b"ours") is True
        assert proxy.acks_lost
        assert store.backend.create(path, b"another builder's") is False  # the first one wins
    s3fs.S3FileSystem.clear_instance_cache()


BROKEN_BODIES = [
    pytest.param({"cut_every": 1}, id="cut"),
    pytest.param({"corrupt_every": 1}, id="corrupt"),  # a checksum fails, or a listing's parse
]
READ_PATHS = [
    pytest.param("/blobs/", id="blob"),
    pytest.param("/manifests/", id="read"),
    pytest.param("/refs/", id="read_versioned"),
    pytest.param("list-type", id="listing"),
]


@pytest.mark.slow
@pytest.mark.parametrize("fault", BROKEN_BODIES)
@pytest.mark.parametrize("where", READ_PATHS)
@pytest.mark.parametrize("command", ["pull", "verify"])
def test_a_body_that_keeps_breaking_is_retried_then_exits_3_in_one_line(
    moto_port: int,
    pushed: tuple[Store, str, str],
    tmp_path: Path,
    command: str,
    where: str,
    fault: dict[str, int],
) -> None:
    _, url, _ = pushed
    args = ["--local-cache", str(tmp_path / "node")] if command == "pull" else ["--deep"]
    with FaultyProxy(moto_port, body_path=where, **fault) as proxy:
        done = neuronbuild(command, "c/latest", "--cache", url, *args, env=through(proxy))
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    assert [line.split(":")[0] for line in error_lines(done.stderr)] == ["store error"], done.stderr
    assert any(RETRY.fullmatch(line) for line in done.stderr.splitlines()), done.stderr


@pytest.mark.slow
def test_a_blob_failing_its_checksum_once_is_read_again_and_the_pull_completes(
    moto_port: int, pushed: tuple[Store, str, str], tmp_path: Path
) -> None:
    local, url, digest = pushed
    node = tmp_path / "node"
    with FaultyProxy(moto_port, body_path="/blobs/", corrupt_every=2) as proxy:
        done = neuronbuild(
            "pull", "c/latest", "--cache", url, "--local-cache", str(node), env=through(proxy)
        )
        assert proxy.corrupted >= 1
    assert done.returncode == 0, done.stderr
    retries = [line for line in done.stderr.splitlines() if RETRY.fullmatch(line)]
    assert len(retries) == proxy.corrupted, done.stderr
    # No client checks S3's stored checksum on obstore's GETs: the bytes' sha256 does, and the
    # store's own SHA-256 (a HEAD) tells bytes changed in transit from bytes corrupt at rest.
    assert all("do not match its digest" in line for line in retries), retries
    assert Store(str(node)).get_manifest(digest) == local.get_manifest(digest)


def test_a_folder_create_whose_link_reply_was_lost_on_nfs_is_this_calls_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    path = store.layout.unit("sha256:" + "b" * 64)
    link = os.link

    def retransmitted(src: str, dst: str) -> None:
        link(src, dst)  # the first LINK landed; its reply was lost, the retransmission says:
        raise FileExistsError(17, "File exists", dst)

    monkeypatch.setattr(backends.os, "link", retransmitted)
    assert store.backend.create(path, b"ours") is True
    assert Path(path).read_bytes() == b"ours"
    monkeypatch.setattr(backends.os, "link", link)
    assert store.backend.create(path, b"another builder's") is False  # the first one wins


@pytest.mark.slow
@pytest.mark.parametrize(
    ("failing", "exit_code"),
    [
        pytest.param("PUT", 0, id="read-back-finds-it-moved"),
        pytest.param("GET HEAD PUT", 3, id="outcome-unknown-exits-3"),
    ],
)
def test_a_ref_write_that_landed_then_failed_its_retries_keeps_the_record_of_its_move(
    moto_port: int, pushed: tuple[Store, str, str], failing: str, exit_code: int
) -> None:
    # Its retries all fail: read back, the ref is found moved (exit 0); when even that read
    # fails the outcome is unknown (exit 3), and the history entry written first must stay.
    _, url, digest = pushed
    with FaultyProxy(moto_port, lose_ack="/refs/c/", then_fail=(failing, "/refs/c/")) as proxy:
        tagged = neuronbuild("tag", "c/latest", "c/prod", "--cache", url, env=through(proxy))
        assert proxy.acks_lost and proxy.failed >= 4
    assert tagged.returncode == exit_code, tagged.stderr
    assert [line.split(":")[0] for line in error_lines(tagged.stderr)] == (
        ["store error"] if exit_code else []
    )
    assert Store(url).get_ref("c", "prod") == digest
    assert [m["manifest"] for m in history(url, "c/prod")] == [digest]
