"""The guard that fails a test reading the checkout's ``build/`` (issue 20), seen at work: each
test reads there on purpose and takes the record back, so the guard itself lets it pass."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

from tests.lib import checkout


def test_an_open_of_the_checkouts_build_in_the_test_process_is_recorded() -> None:
    with contextlib.suppress(OSError):
        open(os.path.join(checkout.BUILD, "tiny-llama", "config.json")).close()
    log = Path(os.environ[checkout.LOG_VARIABLE])
    assert checkout.take_reads(log) == [f"open {checkout.BUILD}/tiny-llama/config.json"]


def test_a_listing_of_the_checkouts_build_in_a_started_process_is_recorded(
    tmp_path: Path,
) -> None:
    log = Path(os.environ[checkout.LOG_VARIABLE])
    script = "import os, contextlib\nwith contextlib.suppress(OSError): os.listdir('build')"
    subprocess.run([sys.executable, "-c", script], cwd=checkout.REPO, check=True)
    found = checkout.take_reads(log)
    assert [line.split(" (")[0] for line in found] == [f"os.listdir {checkout.BUILD}"]


def test_reads_elsewhere_are_not_recorded(tmp_path: Path) -> None:
    (tmp_path / "build").mkdir()
    os.listdir(tmp_path / "build")
    (checkout.REPO / "pyproject.toml").read_text()
    assert checkout.take_reads(None) == []
