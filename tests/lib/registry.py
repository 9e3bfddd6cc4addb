"""The CNCF distribution registry (Debian's ``docker-registry`` package) on loopback, a real OCI
registry for the tests and the benchmarks: plain HTTP on a free port, deletes enabled, its data in a
temporary folder removed when it stops."""

from __future__ import annotations

import contextlib
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from tests.lib.seaweed import free_ports
from tests.lib.service import LoopbackService

INSTALL_HINT = (
    "the OCI registry is not installed: apt-get install docker-registry "
    "(Debian's package of the CNCF distribution registry; make install does it as root)"
)
START_SECONDS = 30.0


def registry_binary() -> str | None:
    """``docker-registry`` (Debian) or ``registry`` (upstream) on PATH; None if absent."""
    return shutil.which("docker-registry") or shutil.which("registry")


class RegistryServer(LoopbackService):
    """A running registry at :attr:`host` (``127.0.0.1:PORT``, plain HTTP); :meth:`stop` ends it
    and removes its data."""

    def __init__(self, binary: str, auth: str = "", deletes: bool = True) -> None:
        """``auth``: the config's ``auth:`` section, as YAML indented under it (none: open);
        ``deletes``: False answers every DELETE 405, as the registry's default configuration,
        GHCR and Docker Hub do."""
        super().__init__("neuronbuild-registry-", "registry.log")
        (port,) = free_ports(1)
        self.host = f"127.0.0.1:{port}"
        self.url = f"http://{self.host}"
        config = self.dir / "config.yml"
        config.write_text(
            "version: 0.1\n"
            "log:\n  level: error\n  accesslog:\n    disabled: true\n"
            f"storage:\n  filesystem:\n    rootdirectory: {self.dir / 'data'}\n"
            f"  delete:\n    enabled: {'true' if deletes else 'false'}\n"
            f"http:\n  addr: {self.host}\n" + (f"auth:\n{auth}" if auth else "")
        )
        self.spawn([binary, "serve", str(config)])

    def wait_ready(self) -> None:
        """Wait until ``/v2/`` answers 200; raise with the log if it exits or does not answer
        within :data:`START_SECONDS`."""
        deadline = time.monotonic() + START_SECONDS
        while True:
            if self.exited() is not None:
                raise RuntimeError(f"registry exited ({self.exited()}):\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/v2/", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except urllib.error.HTTPError as refused:
                if refused.code == 401:  # it answers, asking for credentials
                    return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"registry did not answer at {self.url}:\n{self.tail()}")
            time.sleep(0.1)


def start_registry(auth: str = "", deletes: bool = True) -> RegistryServer:
    """A ready registry on loopback (``auth`` as :class:`RegistryServer` takes it); the caller
    stops it. Raises :class:`FileNotFoundError` with the install hint when the registry is not
    installed."""
    binary = registry_binary()
    if binary is None:
        raise FileNotFoundError(INSTALL_HINT)
    server = RegistryServer(binary, auth, deletes)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def registry(auth: str = "", deletes: bool = True) -> Iterator[RegistryServer]:
    """A registry on loopback for the block's length (``auth`` and ``deletes`` as
    :class:`RegistryServer` takes them)."""
    server = start_registry(auth, deletes)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def registry_root() -> Iterator[str]:
    """``oci+http://127.0.0.1:PORT`` of a registry started for the module; the tests fail, saying
    how to install it, where it is not installed (it is no Python package: ``make install`` and
    ``.ci/run`` install it as root)."""
    if registry_binary() is None:
        pytest.fail(INSTALL_HINT)  # a skipped store test cannot fail: a missing registry fails
    with registry() as server:
        yield f"oci+http://{server.host}"
