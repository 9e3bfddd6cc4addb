"""A recipe's model: a local folder identified by its content, or a hub id at a revision.

vLLM treats ``model`` as a local folder when that path exists (from its working directory), else
as a Hugging Face hub id. A folder enters unit keys by the digest of the files a compile reads
(issue 9): swapping ``config.json`` under the same path must change every key. A hub id enters by
its ``revision``, which must be a commit hash for a fleet build (a branch moves).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from neuronbuild.errors import UserError
from neuronbuild.keys import sha256_digest

READ_AT_COMPILE = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
)
"""Files of a model folder whose bytes a compile reads: the architecture, tokenizer and
generation config, processors, and the weight index (which names every tensor and its file)."""

WEIGHT_SUFFIXES = (".safetensors", ".bin")
"""Weight files: without an index, their names and sizes stand in for it (hashing gigabytes of
weights per plan would cost more than the graphs, which do not depend on weight values)."""

COMMIT_HASH = re.compile(r"^[0-9a-f]{40}$")
"""A hub revision that names one commit (git's 40-hex object id)."""


def local_folder(model: str, workdir: Path) -> Path | None:
    """The folder ``model`` names, from ``workdir`` as vLLM resolves it, or None for a hub id."""
    path = Path(model).expanduser()
    path = path if path.is_absolute() else workdir / path
    return path if path.is_dir() else None


def looks_like_path(model: str) -> bool:
    """Whether ``model`` can only be a path (a hub id is ``name`` or ``org/name``)."""
    return model.startswith(("/", "./", "../", "~")) or model.count("/") > 1


def content_digest(folder: Path) -> dict[str, str]:
    """``file name -> sha256:<hex>`` of each :data:`READ_AT_COMPILE` file in ``folder``; when it
    has no weight index, ``weight file name -> size:<bytes>`` for each weight file too."""
    out = {
        name: sha256_digest((folder / name).read_bytes())
        for name in READ_AT_COMPILE
        if (folder / name).is_file()
    }
    if not any(name.endswith(".index.json") for name in out):
        for path in sorted(folder.iterdir()):
            if path.is_file() and path.name.endswith(WEIGHT_SUFFIXES):
                out[path.name] = f"size:{path.stat().st_size}"
    return out


def is_pinned_revision(revision: str | None) -> bool:
    """Whether a hub ``revision`` names one commit, as a fleet build needs."""
    return revision is not None and COMMIT_HASH.match(revision) is not None


def hub_id_problem(model: str) -> str | None:
    """Why ``model`` is no valid hub id (huggingface_hub's own ``validate_repo_id``, the check its
    downloads and vLLM's loader apply), or None when it is one."""
    from huggingface_hub.errors import HFValidationError

    # validate_repo_id is public API but not re-exported where mypy would see it.
    from huggingface_hub.utils._validators import validate_repo_id

    try:
        validate_repo_id(model)
    except HFValidationError as exc:
        return str(exc).split(":", 1)[0].removeprefix("Repo id ").rstrip(".")
    return None


def check_model_present(
    model: str, revision: str | None, workdir: Path, *, built_from_folder: bool = False
) -> None:
    """Raise UserError, saying how to fetch it, unless the model vLLM will load is on this host:
    the local folder with its ``config.json``, or the hub snapshot of ``revision`` (``main`` when
    None) in the local Hugging Face cache. vLLM runs with ``HF_HUB_OFFLINE=1``, so a missing
    snapshot would otherwise fail late, inside vLLM.

    ``built_from_folder``: the build read ``model`` as a local folder (its units have a
    ``model_files`` factor), so a missing folder is named with where it was looked for and how
    to point there, never taken for a hub id (issue 20)."""
    folder = local_folder(model, workdir)
    if folder is not None:
        if not (folder / "config.json").is_file():
            raise UserError(
                f"model {model}: {folder} has no config.json; point model at a Hugging Face "
                "model folder (config, tokenizer and weights)"
            )
        return
    if built_from_folder:
        path = Path(model).expanduser()
        there = path if path.is_absolute() else workdir / path
        fix = (
            "" if path.is_absolute() else f", or pass --workdir with the folder that holds {model}"
        )
        raise UserError(
            f"model {model}: the build read it from a local folder, and {there} does not "
            f"exist on this node; copy the model folder there{fix}"
        )
    if looks_like_path(model):
        raise UserError(
            f"model {model}: no such folder from {workdir}; build or copy the model there, or, "
            "for a relative path, pass --workdir with the folder the recipe was compiled from"
        )
    problem = hub_id_problem(model)
    if problem:
        raise UserError(
            f"model {model}: neither a folder here nor a valid Hugging Face hub id ({problem}); "
            "set model to an existing folder or an id like org/name"
        )
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model, "config.json", revision=revision or "main")
    if not isinstance(found, str):
        at = f" --revision {revision}" if revision else ""
        raise UserError(
            f"model {model} (revision {revision or 'main'}) is not in the local Hugging Face "
            f"cache, and vLLM runs offline (HF_HUB_OFFLINE=1); fetch it first with "
            f"`hf download {model}{at}`"
        )


def is_hub_id(model: str, workdir: Path) -> bool:
    """Whether vLLM reads ``model`` as a Hugging Face hub id: no folder of that name from
    ``workdir``, not written as a path, and a well-formed id (:func:`hub_id_problem`)."""
    return (
        local_folder(model, workdir) is None
        and not looks_like_path(model)
        and not hub_id_problem(model)
    )


def config_path(model: str, revision: str | None, workdir: Path) -> Path | None:
    """Where this host holds the ``config.json`` vLLM reads for ``model``: in the local folder, or
    for a hub id in the local Hugging Face cache at ``revision`` (``main`` when None), found
    through ``huggingface_hub.try_to_load_from_cache`` (``HF_HUB_CACHE`` / ``HF_HOME`` as it
    resolves them; no network). None when it is not here."""
    folder = local_folder(model, workdir)
    if folder is not None:
        return folder / "config.json"
    if not is_hub_id(model, workdir):
        return None
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model, "config.json", revision=revision or "main")
    return Path(found) if isinstance(found, str) else None


def read_config(args: Mapping[str, Any], workdir: Path) -> dict[str, Any] | None:
    """The ``config.json`` of the model the engine arguments ``args`` name (``model`` at
    ``revision``, :func:`config_path`) as a mapping; None where this host has no readable one
    (for a local folder, the compile host's model check reports that) or ``args`` mistype them
    (a recipe error of its own). A hub model's config is the one its ``revision`` names, so a
    plan read from it is the same on every host that has it when the revision is a commit
    (validate warns when it is not)."""
    model, revision = args.get("model"), args.get("revision")
    if not isinstance(model, str) or not isinstance(revision, str | None):
        return None
    path = config_path(model, revision, workdir)
    if path is None:
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None
