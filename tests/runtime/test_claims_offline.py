"""An offline node serves what it pulled at once: when the store's endpoint refuses connections,
``serve`` falls back to the local tier without first waiting through the retries meant for a
flaky network (which took ~15 s per store opened)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

from neuronbuild.store.cas import Store
from tests.conftest import serve_without_vllm
from tests.lib.builders import publish_units
from tests.lib.claims import fresh_url, s3_root, small_recipe

__all__ = ["s3_root"]


def refused_endpoint() -> str:
    """An endpoint on loopback where nothing listens (a port just released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_node_serves_its_pulled_ref_at_once_when_the_endpoint_refuses(
    s3_root: str, tmp_path: Path
) -> None:
    url = fresh_url("s3", tmp_path, s3_root)
    digest = publish_units(Store(url), small_recipe(tmp_path), tmp_path, "a")
    node = tmp_path / "node"
    pulled = subprocess.run(
        [
            sys.executable,
            "-m",
            "neuronbuild",
            "pull",
            "claims/latest",
            "--cache",
            url,
            "--local-cache",
            str(node),
        ],
        capture_output=True,
        text=True,
    )
    assert pulled.returncode == 0, pulled.stderr
    start = time.monotonic()
    served = serve_without_vllm(
        "--ref",
        "claims/latest",
        "--cache",
        url,
        "--local-cache",
        str(node),
        "--vllm-cache-root",
        str(tmp_path / "root"),
        env={"AWS_ENDPOINT_URL": refused_endpoint()},
    )
    seconds = time.monotonic() - start
    assert served.returncode == 0, served.stderr
    assert seconds < 8, f"the fallback took {seconds:.1f} s"
    assert json.loads(served.stdout)["manifest"] == digest
    assert "refuses connections" in served.stderr and "serving from" in served.stderr
