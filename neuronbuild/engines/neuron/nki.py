"""The NKI artifacts a unit's graphs need: found at compile, carried in the unit, laid out on nodes.

vLLM-Neuron keeps NKI kernel compile results beside its graph entries, as
``{compile_cache}/nki/{key}.json`` (with a ``binaries/`` folder in some versions) and no
completion marker, and promotes them with the graph entries "so that other nodes skip NKI BIR
compilation on warm start" (fidelity row B6: Infinity-AI-Institute/vllm-neuron
``vllm_neuron/nki/nki_cache.py`` ``_NKI_CACHE_SUBDIR``, ``_put_nki_cache_in_dir`` @117bd89d). On
SDK 2.32 the kernel binaries themselves lie outside that cache, under
``/var/tmp/nki-intermediate-cache``, and a graph names them by absolute path in its HLO
(``klir_binary.binary``); a node that pulled only the graph entries failed with ``NCC_EVRF059 ...
does not exist on the host``, exit 70, on all 32 ranks (row B7: foxl-ai/kiln
``kiln/compile_cache.py`` docstring @a04d1fab, measured 2026-10-03).

So a unit carries ``nki/`` whole and, in :data:`CARRIED`, a copy of each binary its complete
entries' ``graph.hlo`` reference, by its path under the intermediate root; serve lays those copies
out at the same absolute paths (:func:`lay_out_binaries`), refusing any path that leaves the root.
"""

from __future__ import annotations

import re
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path, PurePosixPath

from neuronbuild import envs
from neuronbuild.digest import hash_file
from neuronbuild.errors import UserError
from neuronbuild.paths import inside

COMPILE_CACHE = Path("neuron") / "compile_cache"
"""vLLM-Neuron's cache folder under ``VLLM_CACHE_ROOT`` (compilation_cache.md lines 31, 149)."""

NKI_DIR = "nki"
"""The plugin's NKI compile cache, a folder of its cache (``_NKI_CACHE_SUBDIR``)."""

CARRIED = ".nki-intermediate-cache"
"""Where a unit carries its kernel binaries, inside the plugin's cache folder: a dot name is never
a graph key (32 hex), so the plugin's per-key lookups never read it."""

SHARED_DIRS = frozenset({NKI_DIR, CARRIED})
"""Folders of the cache that hold no graph entry: shared by a unit's entries, carried whole."""

PATH_CHARS = rb"[A-Za-z0-9._+\-/]+"
"""Characters of a kernel binary's path as the HLO spells it (text or serialized proto)."""


def intermediate_root() -> Path:
    """Where the NKI compiler leaves kernel binaries (``$NEURONBUILD_NKI_INTERMEDIATE_CACHE``,
    default ``/var/tmp/nki-intermediate-cache``), on the compile host and on the node alike.

    Raises:
        EnvInvalid: the variable is set to something that is not a path.
    """
    root = envs.NKI_INTERMEDIATE_CACHE.get()
    return root if root is not None else Path("/var/tmp/nki-intermediate-cache")


def kernel_refs(hlo: Path, root: Path) -> list[str]:
    """The kernel binaries ``hlo`` (a ``graph.hlo``, text or binary) references under ``root``,
    as relative POSIX paths, sorted, each once; a reference that climbs out with ``..`` is left
    out (it names nothing under the root)."""
    pattern = re.compile(re.escape(str(root).encode()) + rb"/(" + PATH_CHARS + rb")")
    found = set()
    for match in pattern.finditer(hlo.read_bytes()):
        rel = PurePosixPath(match.group(1).decode())
        if ".." not in rel.parts:
            found.add(rel.as_posix())
    return sorted(found)


def nki_cache_files(compile_cache: Path, binaries: Iterable[Path]) -> list[Path]:
    """The files of the plugin's ``nki/`` folder that the unit's graphs use: each record
    (``{key}.json``) that names one of ``binaries`` (the kernel binaries the graphs reference; a
    record's ``dumped_config`` embeds its binary's path, ``nki_cache.py`` ``_ProcessCacheKey``
    comment) and each other file a kept record names (``binaries/``); lock and temporary files
    never. Where no record names any binary (a record format this code does not know), every
    record is kept: carrying too much costs bytes, too little a recompile at start. Records of
    kernels the configuration no longer calls (seeded from an earlier build) are so left out,
    and a unit's files do not depend on the store's history."""
    folder = compile_cache / NKI_DIR
    files = [
        p
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink() and ".tmp" not in p.name and p.suffix != ".lock"
    ]
    records = {p: p.read_bytes() for p in files if p.suffix == ".json" and p.parent == folder}
    names = [str(b).encode() for b in binaries]
    kept = [p for p, data in records.items() if any(n in data for n in names)]
    if not kept:
        return files
    text = b"".join(records[p] for p in kept)
    return kept + [p for p in files if p not in records and p.name.encode() in text]


def kernel_files(compile_cache: Path, entries: Iterable[Path]) -> list[Path]:
    """What the NKI kernels of ``entries`` (complete graph entries) need carried: a copy in
    :data:`CARRIED` of each kernel binary their ``graph.hlo`` reference, taken from the
    intermediate root (written by this run) or from the carried copy a seeded entry brought, and
    the ``nki/`` records of those kernels (:func:`nki_cache_files`).

    Raises:
        RuntimeError: a referenced binary is in neither place (a node would fail with
            ``NCC_EVRF059``), naming the entry and the path.
    """
    root = intermediate_root()
    carried = compile_cache / CARRIED
    copies: set[Path] = set()
    for entry in entries:
        for rel in kernel_refs(entry / "graph.hlo", root):
            dest = carried / rel
            source = root / rel
            if source.is_file() and not source.is_symlink():
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest)
            elif not dest.is_file():
                raise RuntimeError(
                    f"graph entry {entry.name} references NKI kernel binary {root / rel}, which "
                    "this run did not leave and no earlier build carried"
                )
            copies.add(dest)
    binaries = [root / c.relative_to(carried) for c in copies]
    return nki_cache_files(compile_cache, binaries) + sorted(copies)


def lay_out_binaries(cache_root: Path, paths: Iterable[str]) -> int:
    """Copy each laid-out carried binary (a manifest path under ``neuron/compile_cache/CARRIED``,
    verified by the lay-out under ``cache_root``) to the same path under the intermediate root,
    where the graphs name it; a file already there with the same bytes is kept. Returns the
    number of binaries in place.

    Raises:
        UserError: a binary cannot be written there (the folder is not writable, or a file).
        StoreDataInvalid: a path escapes the intermediate root or ``cache_root``
            (:func:`neuronbuild.paths.inside`, as every lay-out refuses it).
    """
    prefix = PurePosixPath(COMPILE_CACHE.as_posix(), CARRIED)
    root = intermediate_root()
    placed = 0
    for path in paths:
        rel = PurePosixPath(path)
        if not rel.is_relative_to(prefix):
            continue
        source = inside(cache_root, path)
        dest = inside(root, rel.relative_to(prefix).as_posix())
        try:
            if dest.is_symlink() or not dest.is_file() or hash_file(dest) != hash_file(source):
                dest.parent.mkdir(parents=True, exist_ok=True)
                tmp = dest.with_name(f".{dest.name[:200]}.{uuid.uuid4().hex}.copy")
                shutil.copyfile(source, tmp)
                tmp.replace(dest)
        except OSError as exc:
            raise UserError(
                f"cannot lay out NKI kernel binary {dest}: {exc.strerror or exc}; the graphs name "
                f"this path, so make {root} a folder this user may write"
            ) from None
        placed += 1
    return placed
