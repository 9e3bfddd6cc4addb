"""What ``serve`` checks on this node before it fetches a byte, as one ordered list
(:data:`CHECKS`): a new check is one function and one line.

Each check reads a :class:`NodeView` (the build being served, this node, the options) and either
raises (a one-line error, or a table for a node that differs from the build) or records what it
found for the checks after it and for ``prepare``: the node differences the operator allowed,
whether the layout root is a node image, whether the lay-out is already there, whether blobs must
be fetched. The order is the order a user would fix things in: the node as built (versions,
target, instruction set), the model and its weights, where the lay-out goes, the local tier, the
address.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from neuronbuild import envs
from neuronbuild.engines.base import Engine
from neuronbuild.errors import UserError
from neuronbuild.human import count
from neuronbuild.model_files import check_model_present
from neuronbuild.node.image_stamp import check_image
from neuronbuild.node.materialize import check_apart, laid_out
from neuronbuild.node.weights import differences_here
from neuronbuild.recipe import Recipe
from neuronbuild.store.records import Manifest
from neuronbuild.store.tiered import TieredStore

from .node_checks import Mismatch, check_node
from .node_config import check_listen, check_local_tier, check_node_folder


@dataclass
class NodeView:
    """What the checks read and what they find.

    Read: the served ``recipe``, its ``engine``, ``manifest`` and its ``digest``; the store
    ``tiers``; ``cwd`` (where a relative model folder resolves); ``environ`` (the environment
    ``serve`` started in); ``root`` (the layout root) and whether the user gave it
    (``root_given``); vLLM's ``argv``; and the options ``deep``, ``allow_mismatch`` and
    ``check_address``. Found: ``allowed`` (the node differences allowed), ``weights`` (the
    weight files checked by content; None: the build records none), ``image`` (the root
    holds a node image of this manifest), ``ready`` (it holds the lay-out), ``missing`` (the
    local tier lacks blobs a remote tier holds)."""

    recipe: Recipe
    engine: Engine
    manifest: Manifest
    digest: str
    tiers: TieredStore
    cwd: Path
    environ: dict[str, str]
    root: Path
    root_given: bool
    argv: list[str]
    deep: bool = False
    allow_mismatch: tuple[str, ...] = ()
    check_address: bool = True
    allowed: list[Mismatch] = field(default_factory=list)
    weights: int | None = None
    image: bool = False
    ready: bool = False
    missing: bool = False


def node_as_built(view: NodeView) -> None:
    """Installed versions, target, instruction set and model content as the build's
    (:func:`~.node_checks.check_node`); records the differences allowed."""
    factors = [unit.factors for unit in view.manifest.units]
    view.allowed = check_node(
        view.recipe, view.engine, factors, view.cwd, view.environ, view.allow_mismatch
    )


def model_here(view: NodeView) -> None:
    """The model's files are on this node (a local folder, or the hub cache at the revision)."""
    from_folder = any("model_files" in unit.factors for unit in view.manifest.units)
    revision = view.recipe.engine_args.get("revision")
    check_model_present(view.recipe.model, revision, view.cwd, built_from_folder=from_folder)


def weights_as_built(view: NodeView) -> None:
    """The model's weight files on this node are the build's, by content, where its manifest
    records them (:func:`~neuronbuild.node.weights.weight_differences`: hashed once, then trusted
    by this node's record while each file keeps its stat; ``deep`` re-hashes them); records
    ``weights`` (the files checked). A difference is refused in one line naming the file, or,
    under ``--allow-mismatch weights``, recorded as allowed."""
    built, revision = view.manifest.weights, view.recipe.engine_args.get("revision")
    found = differences_here(view.recipe.model, revision, view.cwd, built, fresh=view.deep)
    if built is None or found is None:  # model_here has refused a model that is not here
        return
    folder, differences = found
    view.weights = len(built)
    if differences and "weights" in view.allow_mismatch:
        view.allowed += [Mismatch("weights", f"{d.name} {d.built}", d.here) for d in differences]
    elif differences:
        more = len(differences) - 1
        also = f" (and {count(more, 'other file')})" if more else ""
        raise UserError(
            f"model {view.recipe.model}: weight file {differences[0].line()}{also}, in "
            f"{folder}; put the build's weights there, or pass --allow-mismatch weights to "
            "serve these"
        )


def root_apart(view: NodeView) -> None:
    """The layout root is neither inside a folder store of the tiers nor holds one."""
    check_apart(view.root, view.tiers)


def root_usable(view: NodeView) -> None:
    """The layout root is a node image of this manifest (served as it is, read-only), or a folder
    this node may write when a lay-out must be written or re-checked; records ``image`` and
    ``ready``."""
    view.image = check_image(view.root, view.manifest, view.digest, deep=view.deep)
    view.ready = view.image or laid_out(view.root, view.manifest, view.digest)
    if not view.image and (view.deep or not view.ready):
        fix = "pass --vllm-cache-root with a folder this node may write"
        if not view.root_given and envs.CACHE_ROOT.get() is not None:
            fix = "set VLLM_CACHE_ROOT to a folder this node may write (or pass --vllm-cache-root)"
        check_node_folder(view.root, "layout root", fix)


def local_tier_writable(view: NodeView) -> None:
    """When blobs must be fetched from a remote tier, the local tier can take them; records
    ``missing``."""
    tiers = view.tiers
    view.missing = (
        not view.image
        and tiers.remote is not None
        and bool(tiers.local.missing_blobs(view.manifest.files()))
    )
    if view.missing:
        check_local_tier(tiers.local)


def address_free(view: NodeView) -> None:
    """vLLM can bind the address its options give (unless nothing starts now)."""
    if view.check_address:
        check_listen(view.argv[3:])


CHECKS: tuple[Callable[[NodeView], None], ...] = (
    node_as_built,
    model_here,
    weights_as_built,
    root_apart,
    root_usable,
    local_tier_writable,
    address_free,
)
"""Every check, in the order ``prepare`` runs them, all before the first blob is fetched."""


def run_checks(view: NodeView) -> NodeView:
    """Run :data:`CHECKS` on ``view`` in order; ``view``, with what they found.

    Raises:
        UserError: a check failed (see each check; ``NodeMismatch`` for a node that differs from
            the build, ``NodeConfigInvalid`` for a folder or address this node cannot use).
        NoRoom: the layout root or the local tier is full (exit 3).
        StoreDataInvalid: a node image under the root does not hold the manifest as stamped.
    """
    for check in CHECKS:
        check(view)
    return view
