"""The Neuron runtime library and driver of the node ``serve`` runs on, against the release the
build was compiled with (issue 46 item 14).

They are system packages (``aws-neuronx-runtime-lib``, ``aws-neuronx-dkms``), not Python
distributions, so the installed-build factor never sees them. A NEFF from a compiler newer than
the node's runtime fails only at load ("NEFF feature version unsupported", aws-neuron-sdk#820):
a node serving a release's NEFFs needs the runtime and driver that release ships, or newer (the
release table's ``system`` row, from each release's component index page). Each version is read
where it can be: the driver's from the loaded kernel module (``/sys/module/neuron/version``,
else ``modinfo``), the runtime library's from the package manager that installed it
(``dpkg-query``, else ``rpm``). What cannot be read is not compared: a container without the
package database is no difference.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from packaging.version import InvalidVersion, Version

RUNTIME_LIB = "aws-neuronx-runtime-lib"
DRIVER = "aws-neuronx-dkms"
COMPONENTS = (RUNTIME_LIB, DRIVER)
"""The system packages a node check compares (what ``--allow-mismatch`` takes for them)."""

DRIVER_VERSION = Path("sys/module/neuron/version")
"""The loaded driver's version, relative to the file system root (a kernel module's
``MODULE_VERSION``)."""

QUERIES = {
    RUNTIME_LIB: (
        ["dpkg-query", "--showformat=${db:Status-Abbrev} ${Version}\\n", "--show", RUNTIME_LIB],
        ["rpm", "--query", "--queryformat=%{VERSION}\\n", RUNTIME_LIB],
    ),
    DRIVER: (["modinfo", "--field=version", "neuron"],),
}
"""Commands that print a component's version, tried in order where the file is not there."""

QUERY_SECONDS = 5.0
"""How long one version query may take before it counts as unreadable."""


def _queried(argv: list[str]) -> str | None:
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=QUERY_SECONDS, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


@functools.lru_cache(maxsize=8)
def node_versions(
    root: Path = Path("/"), query: Callable[[list[str]], str | None] = _queried
) -> dict[str, str]:
    """The versions of :data:`COMPONENTS` this node has, where they can be read (``root``: the
    file system root, a test's fake tree; ``query``: runs a command, its output or None), read
    once per process (serve checks every unit). Of a package database's answer, only an
    installed package counts (``dpkg``'s ``ii``: a removed one's configuration leaves ``rc``),
    the newest where several are (``rpm`` lists each); a Debian revision
    (``2.34.10.0-6e27b8d5b``) is dropped."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        found[DRIVER] = (root / DRIVER_VERSION).read_text().strip()
    for component, commands in QUERIES.items():
        for argv in commands:
            if found.get(component):
                break
            found[component] = _newest(query(argv) or "") or ""
    return {k: v for k, v in found.items() if v}


def _newest(printed: str) -> str | None:
    """The newest version among one query's lines (``ii  2.34.10.0-1``, ``2.34.10.0``), its
    Debian revision dropped; a line whose ``dpkg`` status is not ``ii`` is not installed."""
    versions = [
        words[-1].split("-", 1)[0]
        for words in map(str.split, printed.splitlines())
        if words and (len(words) == 1 or words[0] == "ii")
    ]
    return max(versions, key=_as_version, default=None)


def _as_version(text: str) -> Version:
    """``text`` as a version for ordering; one that is none orders first."""
    try:
        return Version(text)
    except InvalidVersion:
        return Version("0")


def system_differences(
    needed: Mapping[str, str], release: str, here: Mapping[str, str]
) -> list[tuple[str, str, str]]:
    """``(component, what the build needs, what this node has)`` for each component of
    ``needed`` (the release table's ``system`` row of ``release``) whose version here (``here``,
    :func:`node_versions`) is older; one that cannot be read or compared is not listed."""
    out = []
    for component, version in sorted(needed.items()):
        have = here.get(component)
        try:
            older = have is not None and Version(have) < Version(version)
        except InvalidVersion:
            older = False
        if older:
            out.append((component, f"{version} or newer (Neuron {release})", f"{have}: upgrade it"))
    return out
