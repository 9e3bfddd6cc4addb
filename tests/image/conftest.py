"""The loopback OCI registry the node image tests push to (one per test session)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.lib.registry import RegistryServer, start_registry


@pytest.fixture(scope="session")
def reg() -> Iterator[RegistryServer]:
    server = start_registry()  # not installed: FileNotFoundError names apt-get install
    try:
        yield server
    finally:
        server.stop()
