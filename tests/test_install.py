"""``make install`` as a host runs it (issue 46 item 13): where ``PYTHONDONTWRITEBYTECODE`` is
set (container images, CI hosts), no import writes bytecode, so the install byte-compiles what it
installed once; elsewhere imports write it and the install leaves it to them."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.lib.builders import REPO


def install_commands(tmp_path: Path, **env: str) -> list[str]:
    """The commands ``make install`` would run into a new ``VENV`` (``make -n``: none runs)."""
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    venv = tmp_path / "venv"
    done = subprocess.run(
        ["make", "-n", "-B", f"{venv}/.installed", f"VENV={venv}"],
        cwd=REPO,
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.splitlines()


def test_make_install_byte_compiles_where_imports_write_no_bytecode(tmp_path: Path) -> None:
    def compiles(lines: list[str]) -> list[str]:
        return [line for line in lines if "compileall" in line]

    [compiled] = compiles(install_commands(tmp_path, PYTHONDONTWRITEBYTECODE="1"))
    assert "neuronbuild runtime" in compiled and "purelib" in compiled  # ours and site-packages
    assert not compiles(install_commands(tmp_path))
