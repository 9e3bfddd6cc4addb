"""A recipe family: recipes of one name that differ only in what a node must have to serve them
(target, engine, toolchain pins, an engine's own machine fields such as ``cpu_isa``), sealed as
the entries of one index (:mod:`neuronbuild.store.index`) under one ref.

Two entries one node could serve both are refused here, at plan and at seal, never guessed
between at serve: entries are told apart by their engine, their target, their machine (the OCI
architecture their engine names for them: ``Engine.image_architecture``) or a distribution both
pin at different public versions (no installation has both).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from packaging.version import InvalidVersion, Version

from neuronbuild.engines.registry import (
    MACHINE_FACTORS,
    describe_labels,
    engine_fields,
    get_engine,
    machine_labels,
)
from neuronbuild.errors import RefNotExpected, UserError
from neuronbuild.plan import Plan
from neuronbuild.store.cas import RefConflict, Store
from neuronbuild.store.index import Index, IndexEntry
from neuronbuild.store.moves import Ask, Moved, check_move


def _machine(labels: Mapping[str, Any]) -> str | None:
    try:
        return get_engine(str(labels["engine"])).image_architecture(labels)
    except (ValueError, KeyError):
        return None


def _one_install(pin: str, other: str) -> bool:
    """Whether one installed version satisfies both pins, as a node reads a pin
    (:func:`~neuronbuild.engines.versions.pin_matches`: the same PEP 440 public version, and the
    same local label where both name one)."""
    try:
        a, b = Version(pin), Version(other)
    except InvalidVersion:
        return pin == other
    labels_differ = a.local is not None and b.local is not None and a.local != b.local
    return Version(a.public) == Version(b.public) and not labels_differ


def told_apart(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether no node could serve both entries labelled ``a`` and ``b`` (module docstring):
    another engine or target (a node has one device family, and one vLLM build), another
    machine, or a distribution both pin that no one installation satisfies twice."""
    if a.get("engine") != b.get("engine") or a.get("target") != b.get("target"):
        return True
    if _machine(a) != _machine(b):
        return True
    pins_a, pins_b = dict(a.get("toolchain", {})), dict(b.get("toolchain", {}))
    return any(not _one_install(pins_a[d], pins_b[d]) for d in set(pins_a) & set(pins_b))


def check_told_apart(builds: Sequence[tuple[str, Mapping[str, Any]]], name: str) -> None:
    """Refuse two builds one node could serve both; ``builds``: what to call each (a manifest
    digest, or a recipe file before it is sealed) and its labels.

    Raises:
        UserError: naming both builds and how to fix it.
    """
    for i, (one, mine) in enumerate(builds):
        for other, theirs in builds[i + 1 :]:
            if not told_apart(mine, theirs):
                raise UserError(
                    f"{name}: builds {one} ({describe_labels(mine)}) and {other} "
                    f"({describe_labels(theirs)}) could both be served by one node, so a node "
                    "could not pick between them; give them different targets, machines or "
                    "pinned releases, seal them under different names, or seal the new one "
                    "without --index"
                )


FREE_TEXT = "target, engine, toolchain or " + ", ".join(sorted(engine_fields()))
"""What the builds of one family may differ in, as messages name it."""


def family_difference(mine: Mapping[str, Any], theirs: Mapping[str, Any]) -> str | None:
    """The first field two canonical recipes differ in besides what labels a build (target,
    engine, toolchain, an engine's own fields); None when they are one family."""
    free = {*MACHINE_FACTORS, *engine_fields()}
    return next(
        (k for k in sorted((set(mine) | set(theirs)) - free) if mine.get(k) != theirs.get(k)),
        None,
    )


def check_families(plans: Sequence[Plan]) -> None:
    """Recipes of one run that share a name must be one family: equal but for their labels
    (:data:`~neuronbuild.engines.registry.MACHINE_FACTORS` and engine fields), and told apart
    (:func:`check_told_apart`). Checked before anything compiles.

    Raises:
        UserError: naming the two recipes and the field they differ in.
    """
    first: dict[str, Plan] = {}
    for plan in plans:
        recipe = plan.recipe
        seen = first.setdefault(recipe.name, plan)
        if seen is plan:
            continue
        key = family_difference(recipe.canonical(), seen.recipe.canonical())
        if key is not None:
            raise UserError(
                f"{recipe.source}: name {recipe.name!r} is also the name of "
                f"{seen.recipe.source}, which differs in {key}; recipes of one name are one "
                f"family (they differ only in {FREE_TEXT}): give it its own name"
            )
    for name in first:
        builds = [
            (p.recipe.source, machine_labels(p.units[0].key.factors))
            for p in plans
            if p.recipe.name == name and p.units
        ]
        check_told_apart(builds, name)


def merged(name: str, entries: Sequence[IndexEntry], current: Index | None) -> Index:
    """The index of ``entries`` and those of ``current`` (the ref's index now, or None) whose
    labels no new entry has: a rebuild for the same target and release replaces its old entry.

    Raises:
        UserError: two entries one node could serve both (:func:`check_told_apart`).
    """
    kept = [
        e
        for e in (current.entries if current is not None else ())
        if all(e.labels != n.labels for n in entries)
        and e.manifest not in {n.manifest for n in entries}
    ]
    together = [*kept, *entries]
    check_told_apart([(e.manifest, e.labels) for e in together], name)
    return Index(name, tuple(together))


def as_index(store: Store, digest: str, name: str) -> Index:
    """What ref value ``digest`` holds as an index: the index itself, or a plain manifest as an
    index of one entry (how a ref on one build becomes a family's).

    Raises:
        UserError: ``digest`` is neither. StoreDataInvalid: it is malformed or hostile.
    """
    if store.is_index(digest):
        return store.get_index(digest)
    manifest = store.get_manifest(digest)
    labels = machine_labels(manifest.units[0].factors) if manifest.units else {}
    return Index(name, (IndexEntry(digest, labels),))


def check_one_family(store: Store, index: Index, added: Sequence[IndexEntry]) -> None:
    """Refuse an index whose builds kept from the ref differ from the ``added`` ones in more
    than their labels (:func:`family_difference`): one ref must not serve one recipe on some
    nodes and another on the rest.

    Raises:
        UserError: naming the kept build, the field and the fixes.
    """
    new = {e.manifest for e in added}
    recipe = store.get_manifest(added[0].manifest).recipe
    for entry in (e for e in index.entries if e.manifest not in new):
        key = family_difference(recipe, store.get_manifest(entry.manifest).recipe)
        if key is not None:
            raise UserError(
                f"{index.name}: the ref's build {entry.manifest} ({describe_labels(entry.labels)}) "
                f"differs from this one in {key}, not only in {FREE_TEXT}; seal without "
                "--index to serve this build alone, or rebuild the others with the same recipe"
            )


TRIES = 5
"""How often :func:`move_into_index` reads, merges and swaps again when another writer moved
the ref in between."""


def move_into_index(
    store: Store, name: str, tag: str, entries: Sequence[IndexEntry], ask: Ask, *, keep: bool
) -> Moved:
    """Write an index of ``entries`` and move ``<name>/<tag>`` to it as ``ask`` allows
    (:func:`~neuronbuild.store.moves.check_move`, inside the compare-and-swap). With ``keep``
    (``--index``) the index also holds the builds the ref names now (:func:`as_index`,
    :func:`merged`): CI of each release adds its build, and a rebuild replaces its own entry.
    A writer in between makes it read, merge and swap again, up to :data:`TRIES` times; with
    ``--expect`` the one swap from the expected value lands or is refused.

    Raises:
        UserError: two entries one node could serve both.
        RefNotExpected, RefMovesBack: as :func:`~neuronbuild.store.moves.check_move` says.
        RefConflict: still contended after the tries. StoreError: the store failed.
    """
    ref = f"{name}/{tag}"
    for attempt in range(TRIES):
        current = store.get_ref(name, tag)
        check_move(ref, [], current, None, ask)  # --expect, before writing anything
        base = as_index(store, current, name) if keep and current is not None else None
        index = merged(name, entries, base)
        check_one_family(store, index, entries)
        digest = store.put_index(index)

        def check(now: str | None, digest: str = digest) -> None:
            chain, _ = store.walk_chain(now, store.history_entries(name, tag))
            check_move(ref, [move for _, move in chain], now, digest, ask)

        try:
            previous = store.move_ref(name, tag, digest, current, None if ask.rollback else check)
        except RefConflict:
            time.sleep(0.05 * attempt)  # writers contend, nothing is down
            if ask.expects:
                raise RefNotExpected(
                    f"--expect {ask.expect or 'none'}: {ref} moved while moving it; nothing "
                    "moved; re-run"
                ) from None
            continue
        return Moved(ref, previous, digest)
    raise RefConflict(f"{ref}: other writers kept moving it; retry")
