"""Every store backend runs the store's contract (``conformance.py``): a class per backend, each
supplying a fresh store. A new backend is one class here."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import fsspec
import pytest

from neuronbuild.store.cas import Store
from tests.lib.builders import publish_build
from tests.lib.claims import fresh_url, s3_root, seaweed_root, small_recipe
from tests.store.conformance import AtomicContract, ReadOnlyContract, StoreContract

__all__ = ["s3_root", "seaweed_root"]  # the module's moto and SeaweedFS servers, for the S3 classes


def memory_url() -> str:
    """A new, existing root on fsspec's in-memory file system: a scheme without atomic writes."""
    name = f"conformance-{uuid.uuid4().hex[:10]}"
    fsspec.filesystem("memory").mkdir(name)
    return f"memory://{name}"


class TestFolderStore(AtomicContract):
    @pytest.fixture
    def store_url(self, tmp_path: Path) -> str:
        return fresh_url("folder", tmp_path, None)


class TestS3Store(AtomicContract):
    """moto's S3 server on loopback, one per module (``s3_root``)."""

    @pytest.fixture
    def store_url(self, s3_root: str, tmp_path: Path) -> str:
        return fresh_url("s3", tmp_path, s3_root)

    # Racing writers on moto take 2-4 s here: the slow tier runs them on S3 (the fast tier on
    # folders).

    @pytest.mark.slow
    def test_concurrent_movers_leave_one_unbroken_chain_of_their_successful_moves(
        self, connect: Callable[[], Store], tmp_path: Path
    ) -> None:
        super().test_concurrent_movers_leave_one_unbroken_chain_of_their_successful_moves(
            connect, tmp_path
        )

    @pytest.mark.slow
    def test_set_ref_retries_until_its_move_lands_on_top_of_the_others(
        self, connect: Callable[[], Store], tmp_path: Path
    ) -> None:
        super().test_set_ref_retries_until_its_move_lands_on_top_of_the_others(connect, tmp_path)


class TestSeaweedStore(AtomicContract):
    """A real S3-compatible server, SeaweedFS (``weed mini``) on loopback, one per module
    (``seaweed_root``): the S3 backend's conditional writes as another implementation answers
    them."""

    @pytest.fixture
    def store_url(self, seaweed_root: str, tmp_path: Path) -> str:
        return fresh_url("s3", tmp_path, seaweed_root)


class TestLastWriterWinsStore(StoreContract):
    """Any other fsspec scheme, by the ``--last-writer-wins`` opt-in: right for one writer at a
    time (check-then-write), so it runs the contract without the racing writers."""

    @pytest.fixture
    def store_url(self) -> str:
        return memory_url()

    @pytest.fixture
    def connect(self, store_url: str) -> Callable[[], Store]:
        return lambda: Store(store_url, last_writer_wins=True)


class TestReadOnlyStore(ReadOnlyContract):
    @pytest.fixture
    def published(self, tmp_path: Path) -> tuple[str, str]:
        url = memory_url()
        writer = Store(url, last_writer_wins=True)
        return url, publish_build(writer, small_recipe(tmp_path), tmp_path, "a")
