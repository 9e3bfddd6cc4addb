"""``neuronbuild seal``: once every unit of every recipe is in the store, write each recipe's
manifest and move its ref; otherwise name what is missing and which shard owns it, and write
nothing.

Shards (``compile --shard I/N``) only publish unit records; sealing is this separate step, run once
after all of them, so no shard has to know whether the others are done. It reads the unit records
and lists the blobs (one listing when there are many, see
:meth:`~neuronbuild.store.cas.Store.missing_blobs`); it never reads a blob's bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from neuronbuild.engines.registry import machine_labels
from neuronbuild.errors import UserError
from neuronbuild.human import count
from neuronbuild.node.weights import recorded_weights, weights_summary
from neuronbuild.orchestrate.costs import PlannedUnit
from neuronbuild.orchestrate.family import check_families, move_into_index
from neuronbuild.orchestrate.shard import assign_units
from neuronbuild.plan import Plan
from neuronbuild.store.cas import Store
from neuronbuild.store.index import IndexEntry
from neuronbuild.store.layout import MAX_RECORD_BYTES
from neuronbuild.store.moves import ASK_NOTHING, Ask, Moved, move_ref, precheck
from neuronbuild.store.records import FileRecord, Manifest, UnitRecord

_SMALLEST_FILE = FileRecord("x", "sha256:" + "0" * 64, 0)
"""The smallest file a unit record can list (it lists one at least)."""


@dataclass(frozen=True)
class MissingUnit:
    """A unit a recipe needs that the store lacks: ``why`` (no unit record, or which blob is
    gone) and the ``shard`` that owns it (None when the shard count was not given)."""

    recipe: str
    key: str
    label: str
    why: str
    shard: int | None

    def to_json(self) -> dict[str, Any]:
        return {
            "recipe": self.recipe,
            "key": self.key,
            "label": self.label,
            "why": self.why,
            "shard": self.shard,
        }


@dataclass
class SealReport:
    """What ``seal`` did: ``sealed`` (recipe name, manifest, ref, the ref's previous value, the
    weights recorded: :func:`~neuronbuild.node.weights.weights_summary`) when every unit was
    present, else ``missing`` and nothing written; ``seconds`` of wall time."""

    sealed: list[dict[str, Any]] = field(default_factory=list)
    missing: list[MissingUnit] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "sealed": self.sealed,
            "missing": [m.to_json() for m in self.missing],
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class Sealed:
    """One recipe sealed: its ``manifest`` digest, the move of its ref (to the manifest, or to
    the ``index`` that now holds it: :mod:`.family`) and the ``weights`` it records."""

    manifest: str
    moved: Moved
    weights: tuple[FileRecord, ...] | None
    index: str | None = None


def seal_all(
    sealing: Sequence[tuple[Plan, Mapping[str, UnitRecord]]],
    store: Store,
    tag: str,
    ask: Ask = ASK_NOTHING,
    on_sealed: Callable[[str], None] | None = None,
    *,
    index: bool = False,
) -> list[Sealed]:
    """Write each plan's manifest (its recipe, the record of each of its units, from its
    records by unit key, in plan order, and the digests of its model's weights as this host
    holds them: :func:`~neuronbuild.node.weights.recorded_weights`), then move each
    ``<name>/<tag>`` as ``ask`` allows (:func:`neuronbuild.store.moves.move_ref`:
    compare-and-swap, a move back refused): to the recipe's manifest, or, for a name several
    plans share (a family, :func:`.family.check_families`) or with ``index`` (``--index``), to
    one index of that name's manifests (with ``index``, beside the builds the ref names now:
    :func:`.family.move_into_index`). Returns one :class:`Sealed` per plan, in plan order. The
    one place a build is sealed: ``compile`` and ``seal`` both call it, once every unit is in the
    store. Every move is checked
    (:func:`~neuronbuild.store.moves.precheck`) before the first is made, so a refusal of one
    recipe's move leaves every ref where it was (barring a writer in between). ``on_sealed``
    is called with each manifest digest once every manifest is written and before any ref moves
    (``--sign``: a node under a trust policy never finds a ref on an unsigned build it made).

    Raises:
        UserError: a weight file of a model cannot be read; two builds of a name one node
            could serve both.
        KeyError: a unit of a plan has no record (the caller checks first).
        RefMovesBack, RefNotExpected: a ref was not moved (manifests are written: immutable,
            named by their content, reached by no ref).
        RefConflict: an index's move still contended after its tries.
        StoreDataInvalid: the index the ref names now is malformed (``index``).
        StoreError: the store failed.
    """
    manifests = []
    for plan, records in sealing:
        recipe = plan.recipe
        manifest = Manifest(
            recipe.name,
            recipe.canonical(),
            tuple(records[u.key.digest] for u in plan.units),
            recorded_weights(recipe.model, recipe.engine_args.get("revision"), recipe.workdir),
        )
        manifests.append((store.put_manifest(manifest), manifest))
    if on_sealed is not None:
        for digest, _ in manifests:
            on_sealed(digest)
    by_name: dict[str, list[IndexEntry]] = {}
    for (plan, _), (digest, _) in zip(sealing, manifests, strict=True):
        labels = machine_labels(plan.units[0].key.factors) if plan.units else {}
        by_name.setdefault(plan.recipe.name, []).append(IndexEntry(digest, labels))
    plain = {n: e[0].manifest for n, e in by_name.items() if len(e) == 1 and not index}
    if len(by_name) > 1:  # an index's digest is known once merged: its --expect is checked
        for name in by_name:
            precheck(store, name, tag, plain.get(name), ask)
    moves = {
        name: (
            move_ref(store, name, tag, plain[name], ask)
            if name in plain
            else move_into_index(store, name, tag, entries, ask, keep=index)
        )
        for name, entries in by_name.items()
    }
    return [
        Sealed(
            digest,
            moves[plan.recipe.name],
            manifest.weights,
            None if plan.recipe.name in plain else moves[plan.recipe.name].manifest,
        )
        for (plan, _), (digest, manifest) in zip(sealing, manifests, strict=True)
    ]


def seal_plans(
    plans: Sequence[Plan],
    store: Store,
    *,
    tag: str,
    shards: int | None = None,
    ask: Ask = ASK_NOTHING,
    on_sealed: Callable[[str], None] | None = None,
    index: bool = False,
) -> SealReport:
    """Seal every plan (one manifest per recipe, ref ``<name>/<tag>`` moved by compare-and-swap
    as ``ask`` allows) if the store holds every unit of every plan with all its blobs; else
    report the missing units, each with its owning shard out of ``shards`` (as ``compile
    --shard I/shards`` assigned it), and write nothing. ``on_sealed``, ``index``: see
    :func:`seal_all`.

    Raises:
        UserError: two recipes share a name but are no family (:func:`.family.check_families`).
        StoreError: the store failed.
        StoreDataInvalid: a stored record is malformed.
        RefMovesBack, RefNotExpected: a ref was not moved (see :func:`seal_all`).
    """
    start = time.monotonic()
    check_families(plans)
    report = SealReport()
    keys = [u.key.digest for plan in plans for u in plan.units]
    records = store.get_units(keys)
    gone = {e.digest for e in store.missing_blobs(f for r in records.values() for f in r.files)}
    for plan in plans:
        for unit in plan.units:
            record = records.get(unit.key.digest)
            if record is None:
                why = "no unit record"
            else:
                lost = [f.path for f in record.files if f.digest in gone]
                if not lost:
                    continue
                why = f"the blob of {lost[0]} is missing"
            report.missing.append(
                MissingUnit(plan.recipe.name, unit.key.digest, unit.label(), why, None)
            )
    if report.missing:
        if shards is not None:
            planned = [PlannedUnit(u, plan.engine) for plan in plans for u in plan.units]
            owner = assign_units(planned, store, shards)
            report.missing = [
                MissingUnit(m.recipe, m.key, m.label, m.why, owner[m.key]) for m in report.missing
            ]
        report.seconds = time.monotonic() - start
        return report
    sealing = [(p, records) for p in plans]
    for plan, sealed in zip(
        plans, seal_all(sealing, store, tag, ask, on_sealed, index=index), strict=True
    ):
        report.sealed.append(
            {
                "name": plan.recipe.name,
                "manifest": sealed.manifest,
                "ref": sealed.moved.ref,
                "previous": sealed.moved.previous,
                "index": sealed.index,
                "weights": weights_summary(sealed.weights),
            }
        )
    report.seconds = time.monotonic() - start
    return report


def manifest_floor_bytes(plan: Plan) -> int:
    """The fewest bytes ``plan``'s manifest can take, known before any compile: its recipe and
    every unit's record as sealed (its key, factors and graphs are fixed by the plan), each
    record listing one file with a one-character name and no toolchain; a real build only adds.
    """
    empty = len(Manifest(plan.recipe.name, plan.recipe.canonical(), ()).to_bytes())
    records = [
        len(
            UnitRecord(
                u.key.digest, dict(u.key.factors), u.graphs, (_SMALLEST_FILE,), {}
            ).to_bytes()
        )
        for u in plan.units
    ]
    return empty + sum(records) + max(len(records) - 1, 0)  # a comma between records


def check_manifest_fits(plan: Plan) -> None:
    """Refuse a plan whose manifest would be over the cap a store's readers take
    (:data:`~neuronbuild.store.layout.MAX_RECORD_BYTES`) before anything is compiled, so no
    hours of compiling end in a refused seal (:meth:`~neuronbuild.store.cas.Store.put_manifest`
    refuses the real one).

    Raises:
        UserError: naming the floor, the cap and what to cut.
    """
    floor = manifest_floor_bytes(plan)
    if floor > MAX_RECORD_BYTES:
        raise UserError(
            f"{plan.recipe.source}: its {count(len(plan.units), 'unit')} "
            f"({count(len(plan.graphs), 'graph')}) "
            f"yield a manifest of at least {floor} bytes, over the {MAX_RECORD_BYTES} a store's "
            "readers take; cut the build (fewer buckets) or split the recipe"
        )
