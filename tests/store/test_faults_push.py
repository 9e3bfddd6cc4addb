"""Issue 19, a destination that does not hold what a copy says it holds: ``push``, ``pull`` and
compile's ingest never take a blob of the right size for the right bytes. A folder's copy is
re-hashed locally; an S3 copy is checked by the SHA-256 S3 computed and kept at upload (one HEAD),
or read back where it kept none."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import s3fs

from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord
from neuronbuild.store.transfer import copy_manifest
from tests.lib.builders import cpu_recipe, publish_build
from tests.lib.claims import fresh_url
from tests.lib.commands import neuronbuild as nb
from tests.lib.faults import with_file_size_limit
from tests.lib.s3 import moto_s3

BUCKET = "faults-push"


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    with moto_s3(BUCKET) as env:
        yield env


def published(tmp_path: Path) -> tuple[Store, str]:
    src = Store(str(tmp_path / "ci"), create=True)
    return src, publish_build(src, cpu_recipe(), tmp_path, "a")


def same_size_other_bytes(store: Store, file: FileRecord, *, s3_checksum: bool) -> None:
    """Overwrite ``file``'s blob in ``store`` with other bytes of its size, as a torn or
    tampered copy would leave it (on S3 with or without a stored SHA-256 of its own)."""
    bad = b"\0" * file.size
    path = store.layout.blob(file.digest)
    if store.is_folder:
        Path(path).write_bytes(bad)
        return
    extra = {"ChecksumAlgorithm": "SHA256"} if s3_checksum else {}
    s3fs.S3FileSystem(skip_instance_cache=True).pipe_file(path, bad, **extra)


def pushed(src: Store, url: str, env: dict[str, str]) -> str:
    result = nb("push", "tiny/latest", "--from", src.url, "--cache", url, env=env)
    assert result.returncode == 0, result.stderr
    return result.stderr


@pytest.mark.parametrize(("kind", "s3_checksum"), [("folder", False), ("s3", True), ("s3", False)])
@pytest.mark.slow
def test_push_replaces_a_same_size_corrupt_blob_the_destination_holds(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, s3_checksum: bool
) -> None:
    env = request.getfixturevalue("s3_env") if kind == "s3" else {}
    src, digest = published(tmp_path)
    url = fresh_url(kind, tmp_path, f"s3://{BUCKET}")
    pushed(src, url, env)
    dst = Store(url)
    file = dst.get_manifest(digest).blobs()[0]
    same_size_other_bytes(dst, file, s3_checksum=s3_checksum)
    assert dst.check_blob(file) is not None and not dst.missing_blobs([file])
    stderr = pushed(src, url, env)
    assert f"note: {dst.blob_url(file.digest)} is corrupt" in stderr, stderr
    assert dst.check_blob(file) is None
    verified = nb("verify", digest, "--deep", "--cache", url, env=env)
    assert verified.returncode == 0, verified.stderr


def test_an_s3_destination_is_checked_by_its_stored_sha256_reading_no_blob(
    s3_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, digest = published(tmp_path)
    dst = Store(fresh_url("s3", tmp_path, f"s3://{BUCKET}"))
    copy_manifest(src, dst, digest)

    def no_reads(store: Store, file: FileRecord) -> str | None:
        raise AssertionError(f"read back {file.digest}: its stored SHA-256 was enough")

    monkeypatch.setattr(Store, "check_blob", no_reads)
    report = copy_manifest(src, dst, digest)
    assert (report.copied, report.notes) == (0, ())


def test_compile_ingest_replaces_a_same_size_corrupt_blob_instead_of_sealing_it(
    tmp_path: Path,
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    local = tmp_path / "graph.bin"
    local.write_bytes(os.urandom(4096))
    [(digest, size)] = store.put_files([local])
    file = FileRecord("graph.bin", digest, size)
    same_size_other_bytes(store, file, s3_checksum=False)
    store.put_files([local])
    assert store.check_blob(file) is None


@pytest.mark.slow
def test_a_push_to_s3_whose_temporary_folder_refuses_a_write_names_that_folder(
    s3_env: dict[str, str], tmp_path: Path
) -> None:
    src, _ = published(tmp_path)
    url = fresh_url("s3", tmp_path, f"s3://{BUCKET}")
    result = with_file_size_limit(1024, "push", "tiny/latest", "--from", src.url, "--cache", url)
    assert result.returncode == 3, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    expected = f"error: {tempfile.gettempdir()} (temporary folder, $TMPDIR): File too large"
    assert line.startswith(expected), line
    assert "store error" not in line and src.root not in line
