"""A model's weight files by content: digested when a build is sealed, checked on a node before
vLLM starts (issue 45).

Unit keys name weight files by name and size only (graphs do not depend on weight values:
:mod:`neuronbuild.model_files`), so without this a node holding other weights of the same sizes (a
half-synced copy, a re-quantized checkpoint, a tampered file) would serve them under a signed
build. The manifest records the sha256 of every weight file vLLM's loader reads
(:func:`weight_names`, at the top of the folder vLLM loads: the local model folder, or the hub
snapshot of the revision), and a node compares its own before anything is fetched.

Hashing gigabytes is the cost, paid once: files are hashed in parallel on the host's cores, and a
record of what was found (:func:`checked_path`, :mod:`.host_records`: each file's device, inode,
size, mtime and ctime, which no write can set back, with its digest) lets a repeat skip every file
that keeps its stat, as :mod:`neuronbuild.node.image_stamp` trusts a hashed image.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from neuronbuild.digest import hash_file, short
from neuronbuild.errors import UserError
from neuronbuild.folders import boot_id
from neuronbuild.human import count, size
from neuronbuild.model_files import config_path
from neuronbuild.node.host_records import read_record, record_path, stat_key, write_record
from neuronbuild.store.records import FileRecord


def model_folder(model: str, revision: str | None, workdir: Path) -> Path | None:
    """The folder vLLM loads ``model`` from on this host: the local folder, or the hub snapshot
    of ``revision`` in the local Hugging Face cache (:func:`~neuronbuild.model_files.config_path`);
    None when it is not here."""
    config = config_path(model, revision, workdir)
    return config.parent if config is not None and config.is_file() else None


NOT_LOADED = ("training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")
"""Files a checkpoint folder may hold that vLLM's loader skips (``filter_files_not_needed_for_
inference``, vllm/model_executor/model_loader/weight_utils.py)."""

SAFETENSORS_INDEX = "model.safetensors.index.json"


def weight_names(folder: Path) -> list[str]:
    """The weight files vLLM's default loader (``load_format: auto``) reads from ``folder``,
    sorted: the ``*.safetensors`` at its top when there are any (only those the index's
    ``weight_map`` names, when it has ``model.safetensors.index.json``), else its ``*.bin``
    files but :data:`NOT_LOADED` (``DefaultModelLoader._prepare_weights``). So a node whose
    folder also holds files vLLM would not load (a full hub download's ``pytorch_model.bin``
    beside the safetensors) differs from CI in none of them."""
    top = sorted(p.name for p in folder.iterdir() if p.is_file())
    safetensors = [n for n in top if n.endswith(".safetensors")]
    if not safetensors:
        return [n for n in top if n.endswith(".bin") and n not in NOT_LOADED]
    try:
        named = set(json.loads((folder / SAFETENSORS_INDEX).read_bytes())["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return safetensors  # no index (or one vLLM could not read either): every file
    return [n for n in safetensors if n in named]


def checked_path(folder: Path) -> Path:
    """This host's record of the weights last hashed in ``folder``:
    ``$XDG_CACHE_HOME/neuronbuild/weight-checks/<hash of the folder's real path>.json``: the
    boot it was written in and, per file name, ``[device, inode, size, mtime ns, ctime ns,
    digest]``."""
    return record_path("weight-checks", str(folder.resolve()))


def _read_checked(path: Path) -> dict[str, Any]:
    """The files of the record at ``path``; empty when absent, unreadable, malformed or written
    in another boot (a crash since may have lost bytes a file had then:
    :func:`~neuronbuild.folders.boot_id`), and then every file is hashed."""
    value = read_record(path)
    if value is None or value.get("boot") != boot_id():
        return {}
    files = value.get("files")
    return files if isinstance(files, dict) else {}


def digest_weights(
    folder: Path, *, fresh: bool = False, jobs: int | None = None
) -> tuple[FileRecord, ...]:
    """Every weight file of ``folder`` (:func:`weight_names`) as ``FileRecord(name, sha256, size
    in bytes)``, sorted by name: each file whose stat matches this host's record
    (:func:`checked_path`) by the recorded digest, the others hashed on ``jobs`` threads (default:
    the host's cores), largest first; ``fresh`` hashes every file. The record is rewritten with
    what was hashed.

    Raises:
        UserError: a weight file cannot be read (naming it and why), or changed while it was
            hashed (its stat before and after differ: its digest would be of no one version).
    """
    checked = checked_path(folder)
    record = {} if fresh else _read_checked(checked)
    names = weight_names(folder)
    found: dict[str, tuple[str, int]] = {}
    stats: dict[str, list[int]] = {}
    try:
        for name in names:
            stats[name] = stat_key(folder / name)
            known = record.get(name)
            if isinstance(known, list) and len(known) == 6 and known[:5] == stats[name]:
                found[name] = (str(known[5]), stats[name][2])
        todo = sorted(set(names) - set(found), key=lambda n: -stats[n][2])
        with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
            hashed = dict(zip(todo, pool.map(lambda n: hash_file(folder / n), todo), strict=True))
        moved = [n for n in todo if stat_key(folder / n) != stats[n]]
    except OSError as exc:
        raise UserError(
            f"model weights in {folder}: cannot read {exc.filename or folder}: {exc.strerror}; "
            "make every weight file readable by this user"
        ) from None
    if moved:
        raise UserError(
            f"model weights in {folder}: {moved[0]} changed while it was hashed; wait until "
            "whatever writes it is done, then run again"
        )
    found.update(hashed)
    settled = {n: stats[n] + [hashed[n][0]] for n in todo}
    if settled:  # a read-only cache hashes every time
        kept = {n: record[n] for n in names if n in record and n not in settled}
        write_record(checked, {"boot": boot_id(), "files": kept | settled})
    return tuple(FileRecord(n, *found[n]) for n in names)


@dataclass(frozen=True)
class WeightDifference:
    """One weight file this node holds otherwise than the build: its ``name``, what the build
    recorded and what this node has (``(absent)`` where one side lacks it)."""

    name: str
    built: str
    here: str

    def line(self) -> str:
        """The difference as a clause: ``model.safetensors is sha256:ab12... (N bytes) here, the
        build's is sha256:cd34... (N bytes)``."""
        if self.here == ABSENT:
            return f"{self.name} is missing here"
        if self.built == ABSENT:
            return f"{self.name} is here but not in the build (vLLM would load it)"
        return f"{self.name} is {self.here} here, the build's is {self.built}"


ABSENT = "(absent)"


def _text(entry: FileRecord | None) -> str:
    return ABSENT if entry is None else f"{short(entry.digest)} ({entry.size} bytes)"


def weight_differences(
    built: Sequence[FileRecord], folder: Path, *, fresh: bool = False
) -> list[WeightDifference]:
    """How the weight files in ``folder`` differ from ``built`` (a manifest's ``weights``): a file
    missing, of other bytes (size or sha256), or not in the build; empty when they match.
    ``fresh``: hash every file though this host's record holds (``serve --deep``).

    Raises:
        UserError: a weight file cannot be read.
    """
    here = {f.path: f for f in digest_weights(folder, fresh=fresh)}
    want = {f.path: f for f in built}
    return [
        WeightDifference(name, _text(want.get(name)), _text(here.get(name)))
        for name in sorted(set(want) | set(here))
        if want.get(name) != here.get(name)
    ]


def differences_here(
    model: str,
    revision: str | None,
    workdir: Path,
    built: Sequence[FileRecord] | None,
    *,
    fresh: bool = False,
) -> tuple[Path, list[WeightDifference]] | None:
    """``(the folder, how its weight files differ from built)`` for ``model`` at ``revision`` as
    this host holds it (from ``workdir``, :func:`model_folder`; :func:`weight_differences`);
    None when the build records no weights (``built`` None) or the model is not here.

    Raises:
        UserError: a weight file cannot be read, or changed while it was hashed.
    """
    folder = model_folder(model, revision, workdir)
    if built is None or folder is None:
        return None
    return folder, weight_differences(built, folder, fresh=fresh)


def recorded_weights(
    model: str, revision: str | None, workdir: Path
) -> tuple[FileRecord, ...] | None:
    """What a build seals as its ``weights`` (:class:`~neuronbuild.store.records.Manifest`): the
    digest of every weight file of ``model`` at ``revision`` as this host holds it (from
    ``workdir``, :func:`model_folder`); None when this host holds no weight file of it (a hub
    model whose snapshot has its config alone, or a model absent here).

    Raises:
        UserError: a weight file cannot be read.
    """
    folder = model_folder(model, revision, workdir)
    if folder is None or not weight_names(folder):
        return None
    return digest_weights(folder)


def weights_summary(weights: Sequence[FileRecord] | None) -> dict[str, int] | None:
    """What ``compile --json`` and ``seal --json`` say of a manifest's ``weights``: ``{"files":
    count, "bytes": total size}``, or None when it records none."""
    if weights is None:
        return None
    return {"files": len(weights), "bytes": sum(w.size for w in weights)}


def weights_line(model: str, summary: dict[str, int] | None) -> str:
    """One line of what a seal recorded of ``model``'s weights (:func:`weights_summary`), for
    ``compile`` and ``seal``."""
    if summary is None:
        return (
            f"no weights recorded: no weight file of {model} is on this host, so nodes cannot "
            "check theirs; seal where the model's weights are"
        )
    return (
        f"recorded {count(summary['files'], 'weight file')} of {model} "
        f"({size(summary['bytes'])}) by sha256; serve checks them on each node"
    )
