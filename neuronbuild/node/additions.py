"""Serve's half of additions (:mod:`neuronbuild.store.additions`): choose the one addition a
node lays out beside a manifest's files, and lay it out.

An addition is laid out when it is well formed, of the kind the build's engine gives back, was
captured on a node with this node's target and exactly its installed builds (a trace of another
torch-neuronx is another trace), passes the trust policy when there is one, and names no path of
the manifest's. The newest such addition (by its capture time, then name) wins; every other is
skipped with one note saying why. A file this node already holds is kept (its own start wrote
it), so an addition never replaces a byte the node has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from neuronbuild.digest import short
from neuronbuild.errors import NoRoom, StoreDataInvalid, StoreError
from neuronbuild.human import count, size
from neuronbuild.node.materialize import lay_out_lock, place, sweep_temporaries
from neuronbuild.paths import inside
from neuronbuild.store.additions import Addition, NodeIdentity, read_addition
from neuronbuild.store.tiered import TieredStore

if TYPE_CHECKING:
    from neuronbuild.attest.policy import Policy
    from neuronbuild.engines.base import Engine


def node_builds(engine: Engine) -> dict[str, str | None]:
    """This node's installed builds of ``engine``'s required and observed toolchain
    (:func:`~neuronbuild.engines.versions.installed_builds`): what an addition's node must have
    had."""
    from neuronbuild.engines.versions import installed_builds

    return installed_builds({*engine.required_toolchain, *engine.observed_toolchain})


def _clashes(paths: Iterable[str], manifest_paths: set[str]) -> str | None:
    """The first path that is a manifest path, a folder of one, inside one, or beside one in
    its folder (an entry of the build is the build's alone: ``capture`` never gives back a file
    written there); None if none."""
    folders = {str(p) for m in manifest_paths for p in PurePosixPath(m).parents}
    entries = {str(PurePosixPath(m).parent) for m in manifest_paths}
    for path in paths:
        parents = {str(p) for p in PurePosixPath(path).parents}
        beside = str(PurePosixPath(path).parent) in entries  # a manifest path itself included
        if path in folders or parents & manifest_paths or beside:
            return path
    return None


def _differs(theirs: NodeIdentity, target: str, installed: Mapping[str, str | None]) -> str | None:
    """How the capturing node differs from this one (target, or the first differing installed
    build), else None."""
    if theirs.target != target:
        return f"target {theirs.target}, this node's is {target}"
    for dist in sorted(set(theirs.installed) | set(installed)):
        if theirs.installed.get(dist) != installed.get(dist):
            mine = installed.get(dist) or "not installed"
            return f"{dist} {theirs.installed.get(dist) or 'not installed'}, this node has {mine}"
    return None


def choose_addition(
    raw: Mapping[str, bytes],
    manifest: str,
    manifest_paths: set[str],
    kind: str,
    here: tuple[str, Mapping[str, str | None]],
    policy: Policy | None,
) -> tuple[Addition | None, list[str]]:
    """The addition of ``raw`` (name -> bytes, :meth:`TieredStore.get_additions` of manifest
    ``manifest``) to lay out, and one note per addition skipped. ``here``: this node's target and
    installed builds; ``policy``: the node's trust policy (None: an unsigned addition is laid out,
    as an unsigned manifest is served)."""
    notes: list[str] = []
    found: list[Addition] = []
    for name, data in sorted(raw.items()):
        what = f"addition {short(name)} of {short(manifest)}"
        try:
            addition = read_addition(data, what, manifest, name)
        except StoreDataInvalid as exc:
            notes.append(f"{exc}; skipped")
            continue
        differs = _differs(addition.node, *here)
        clash = _clashes((f.path for f in addition.files), manifest_paths)
        refusal = policy.addition_refusal(addition) if policy is not None else None
        if addition.kind != kind:
            notes.append(f"{what} is a {addition.kind}, this build's engine takes {kind}; skipped")
        elif differs is not None:
            notes.append(f"{what} was captured on {addition.node.host} with {differs}; skipped")
        elif clash is not None:
            notes.append(f"{what} names {clash}, a path of the manifest's; skipped")
        elif refusal is not None:
            notes.append(f"{refusal}; skipped")
        else:
            found.append(addition)
    if not found:
        return None, notes
    return max(found, key=lambda a: (a.node.captured, a.name)), notes


def lay_out_addition(tiers: TieredStore, root: Path, addition: Addition) -> int:
    """Lay ``addition``'s files out under ``root`` (blobs fetched into the local tier first,
    every file verified against its digest); a file already under ``root`` is kept, and the
    temporary files a killed lay-out left are removed first (holding the root's lock, as
    :func:`~neuronbuild.node.materialize.lay_out` does). Returns how many files were laid out.

    Raises:
        StoreDataInvalid: a blob is missing or corrupt in every tier (files laid out before it
            stay: each trace is a file of its own, and a missing one is traced again).
        StoreError: the remote failed fetching a blob the local tier lacks.
        NoRoom: the layout root or the local tier is full.
    """
    lock = lay_out_lock(root)  # a lay-out of this root sweeps temporary files
    try:
        if lock is not None:  # what a serve killed laying an addition out left (its stamp holds)
            sweep_temporaries(root)
        needed = [
            f
            for f in addition.files
            if (dest := inside(root, f.path)).is_symlink() or not dest.exists()
        ]
        tiers.fill_blobs(needed)  # a node that holds them all fetches nothing (offline too)
        for file in needed:
            place(tiers, root, file, deep=False)
    finally:
        if lock is not None:
            lock.release()
    return len(needed)


def add_to_layout(
    tiers: TieredStore,
    root: Path,
    manifest: str,
    manifest_paths: set[str],
    kind: str,
    here: tuple[str, Mapping[str, str | None]],
    policy: Policy | None,
) -> tuple[str | None, list[str]]:
    """:func:`choose_addition` among the additions of ``manifest`` in ``tiers`` and
    :func:`lay_out_addition` of the one chosen: its name (None when none was laid out) and the
    notes for the user (what was laid out, what was skipped and why).

    Raises:
        NoRoom: the layout root or the local tier is full.
    """
    try:
        raw = tiers.get_additions(manifest)
    except (StoreDataInvalid, StoreError) as exc:  # the build serves without them
        return None, [f"{exc}; no addition laid out"]
    chosen, notes = choose_addition(raw, manifest, manifest_paths, kind, here, policy)
    if chosen is None:
        return None, notes
    try:
        laid = lay_out_addition(tiers, root, chosen)
    except NoRoom:
        raise
    except (StoreDataInvalid, StoreError) as exc:
        return None, [*notes, f"addition {short(chosen.name)}: {exc}; not laid out"]
    except OSError as exc:  # a full disk is the node's condition; anything else skips it
        room = NoRoom.of(exc, exc.filename or root, "cannot lay out an addition")
        if room is not None:
            raise room from None
        return None, [*notes, f"addition {short(chosen.name)}: {exc}; not laid out"]
    node = chosen.node
    notes.append(
        f"laid out addition {short(chosen.name)} ({chosen.kind}, {count(laid, 'file')} of "
        f"{len(chosen.files)}, {size(chosen.size())}; captured on {node.host} at {node.captured})"
    )
    return chosen.name, notes
