"""Installed distributions as the toolchain sees them: PEP 440 pin matching, the full installed
version and a digest of the files each distribution installed.

Why: Neuron SDK 2.32 wheels report PEP 440 local labels (``neuronx-cc 2.27.5334.0+f702b353``,
``nki 0.6.0+31049202112.g85070674``, ``libtorch-neuronx-lite 2.11.0.1.0.1284+f49d8626``;
reference/vllm-neuron-fidelity.md row B12, kiln ``docs/research/neuron-stack.md`` section 1.1 @
a04d1fab) while the release manifest lists base versions (aws-neuron-sdk @81ce03ae
``src/helperscripts/n2-manifest.json`` lines 117-125). A pin therefore matches on the public
version, and the installed string with its label is what a build records. The graph key of
vLLM-Neuron does not cover an NKI kernel's source (kiln ``docs/neuron-notes.md``, "The graph cache
key does not include an NKI kernel's source"), so a patched distribution with an unchanged
version is told apart by a digest of its ``RECORD`` (the wheel's own list of installed files and
their hashes, PEP 376 / PEP 627). Compile (``build.compile.check_toolchain``) and serve
(``neuronbuild_runtime.node_checks``) compare through :func:`pin_matches` alone.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from collections.abc import Iterable
from functools import lru_cache

from packaging.version import InvalidVersion, Version


def pin_matches(pin: str, installed: str | None) -> bool:
    """Whether the version ``installed`` (None: not installed) satisfies the recipe's ``pin``.

    A pin without a local label (``2.27.5334.0``) matches any installed build of that public
    version (``2.27.5334.0+f702b353``); a labelled pin matches only that build. Versions compare
    as PEP 440 versions (``packaging.version.Version``), so equivalent spellings match; a string
    that is not PEP 440 matches only itself.
    """
    if installed is None:
        return False
    try:
        want, have = Version(pin), Version(installed)
    except InvalidVersion:
        return pin == installed
    if want.local is None:
        return Version(want.public) == Version(have.public)
    return want == have


def is_labelled(version: str) -> bool:
    """Whether ``version`` carries a PEP 440 local label (``+...``)."""
    try:
        return Version(version).local is not None
    except InvalidVersion:
        return False


def public_version(version: str) -> str:
    """``version`` without its local label, normalised (``2.27.5334.0+f702b353`` ->
    ``2.27.5334.0``); a string that is not PEP 440 is returned unchanged."""
    try:
        return Version(version).public
    except InvalidVersion:
        return version


def installed_version(distribution: str) -> str | None:
    """The full version of ``distribution`` installed here, label included (``importlib.metadata``),
    None when it is not installed."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


@lru_cache(maxsize=64)
def record_digest(distribution: str) -> str | None:
    """``sha256:<hex>`` over what ``distribution`` installed, from its ``RECORD``: each file's path
    and hash, sorted. Left out, because they differ between identical installs: files without a
    hash (byte-compiled ``.pyc``), files outside the package folder (``../../bin`` scripts, whose
    shebang names the interpreter) and the ``.dist-info`` folder itself (``INSTALLER``,
    ``direct_url.json``). None when the distribution is absent or lists no ``RECORD``."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    text = dist.read_text("RECORD")
    if text is None:
        return None
    lines = []
    for row in text.splitlines():
        path, _, rest = row.partition(",")
        file_hash = rest.partition(",")[0]
        top = path.split("/", 1)[0]
        if not file_hash or path.startswith("..") or top.endswith(".dist-info"):
            continue
        lines.append(f"{path},{file_hash}")
    body = "\n".join(sorted(lines)).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def installed_build(distribution: str) -> str | None:
    """One string naming the build of ``distribution`` installed here: its full version, label
    included, and its :func:`record_digest` (``2.27.5334.0+f702b353 sha256:...``); None when it is
    not installed. Two local builds of one base version, or a patched copy with an unchanged
    version, give different strings."""
    version = installed_version(distribution)
    if version is None:
        return None
    digest = record_digest(distribution)
    return version if digest is None else f"{version} {digest}"


def installed_builds(distributions: Iterable[str]) -> dict[str, str | None]:
    """:func:`installed_build` of each distribution, by name (sorted): the ``installed`` factor of
    a unit key and what ``doctor`` and serve's node check show."""
    return {d: installed_build(d) for d in sorted(distributions)}
