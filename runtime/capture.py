"""``neuronbuild capture``: on the first node that serves a build, start it once and give back to
the store what that start wrote and no compile host could (vLLM Neuron 0.29's Precompile Cache),
as an addition to the manifest (:mod:`neuronbuild.store.additions`), so later nodes skip it.

What the node proves before anything is published:

1. it passes every check ``serve`` makes (the manifest, its policy, the node's installed builds
   and target, the model, every blob), with no ``--allow-mismatch``: an addition is recorded
   with the node's identity, which later nodes must match exactly;
2. the build's engine gives back a kind of addition for its release
   (:meth:`~neuronbuild.engines.base.Engine.addition_kind`);
3. vLLM, started exactly as ``serve`` starts it on a fresh lay-out (no earlier trace, no earlier
   addition), served: it logged :data:`~.conformance.READY` or exited 0 within the timeout.

Once per build, node identity and signer: when the store holds an addition this node would lay
out already (signed by ``--key``'s key, when one is given), nothing is started or published, so
an autoscaled fleet that runs ``capture`` at every first start adds one addition, not one per
node (``gc`` keeps the newest of each identity).

Then the files that start wrote (not the manifest's, nor neuronbuild's own, nor vLLM's per-node
caches of :data:`NODE_LOCAL`, nor the bookkeeping files it adds inside an entry of the manifest)
are stored as blobs, and the addition's object last, signed with ``--key``'s key when given.
The fresh lay-out is removed either way.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from neuronbuild import envs
from neuronbuild.engines.registry import engine_for
from neuronbuild.errors import UserError
from neuronbuild.human import count, size
from neuronbuild.node.additions import choose_addition, node_builds
from neuronbuild.store.records import FileRecord
from neuronbuild.store.tiered import TieredStore

from .conformance import NODE_LOCAL, READY, start_for
from .serve import ServeSource, prepare, resolve

if TYPE_CHECKING:
    from securesystemslib.signer import Signer

    from neuronbuild.attest.policy import Policy
    from neuronbuild.engines.base import Engine
    from neuronbuild.recipe import Recipe


@dataclass(frozen=True)
class Captured:
    """One addition published: its ``name``, the ``manifest`` it adds to, its ``kind``, how many
    ``files`` and ``bytes``, the ``keyid`` that signed it (None: unsigned), where it was stored
    (``url``) and the capturing ``host``."""

    manifest: str
    name: str
    kind: str
    files: int
    bytes: int
    keyid: str | None
    url: str
    host: str
    existing: bool = False
    """Nothing was captured: this node would lay out an addition the store holds already."""

    def to_json(self) -> dict[str, Any]:
        """``capture --json`` less its ``store`` (``neuronbuild/schemas/capture.json``)."""
        return {
            "manifest": self.manifest,
            "addition": self.name,
            "kind": self.kind,
            "n_files": self.files,
            "bytes": self.bytes,
            "keyid": self.keyid,
            "url": self.url,
            "host": self.host,
            "existing": self.existing,
        }

    def line(self) -> str:
        """The human result line."""
        if self.existing:
            return (
                f"{self.manifest} has addition {self.name} already ({self.kind}, "
                f"{count(self.files, 'file')}, captured on {self.host}), which this node would "
                "lay out; nothing captured"
            )
        signed = f"signed by key {self.keyid[:16]}" if self.keyid else "unsigned"
        return (
            f"captured {self.kind} for {self.manifest}: {count(self.files, 'file')}, "
            f"{size(self.bytes)} ({signed}) as addition {self.name}"
        )


def written(root: Path, before: set[Path], manifest_paths: set[str]) -> list[str]:
    """The files (root-relative POSIX paths, sorted) under ``root`` that are not in ``before``
    and are not neuronbuild's own (``.neuronbuild/``), vLLM's per-node caches
    (:data:`NODE_LOCAL`), or written inside a folder of the manifest's files (an entry's
    bookkeeping, such as the compile cache's ``.cache_accessed``). A new compile cache entry, a
    folder of its own, is kept."""
    entries = {str(PurePosixPath(p).parent) for p in manifest_paths}
    out = []
    for path in sorted(root.rglob("*")):
        if path in before or path.is_symlink() or not path.is_file():
            continue
        rel = PurePosixPath(path.relative_to(root).as_posix())
        if rel.parts[0] in (".neuronbuild", *NODE_LOCAL) or str(rel.parent) in entries:
            continue
        out.append(rel.as_posix())
    return out


def capture(
    source: ServeSource,
    tiers: TieredStore,
    *,
    signer: Signer | None = None,
    timeout: float = 1800.0,
    policy: Policy | None = None,
    serving_args: list[str] | None = None,
    workdir: Path | None = None,
) -> Captured:
    """Start ``source``'s build once on this node and publish what the start wrote as an
    addition to its manifest (module docstring), in ``tiers``' remote store (the local tier when
    there is none). ``timeout``: seconds vLLM may take to serve; ``signer``: the node's key;
    ``policy``: the trust policy the manifest must pass (as for ``serve``); ``serving_args``:
    vLLM server options; ``workdir``: as ``serve --workdir``.

    Raises:
        UserError: see :func:`~.serve.prepare`; the build's engine gives nothing back for its
            release; vLLM did not serve within ``timeout``; the start wrote nothing to give back.
        StoreError: the store failed (blobs stored before it stay, unreferenced, for ``gc``).
    """
    recipe, manifest, digest, _ = resolve(source, tiers, policy)
    engine = engine_for(recipe)
    kind = engine.addition_kind(recipe.toolchain)
    if kind is None:
        raise UserError(
            f"a node serving {recipe.name} ({recipe.engine} engine) writes nothing at start "
            "that its build lacks (only vLLM Neuron releases with a Precompile Cache do, 2.33 "
            "and later); nothing to capture"
        )
    # Once per build and node identity: an autoscaled fleet's every first start adds nothing.
    here = (recipe.target, node_builds(engine))
    paths = {f.path for f in manifest.files()}
    held, _ = choose_addition(tiers.get_additions(digest), digest, paths, kind, here, policy)
    keyid = str(signer.public_key.keyid) if signer is not None else None
    if held is not None and (keyid is None or keyid in held.keyids):
        url = (tiers.remote or tiers.local).url
        return Captured(
            digest, held.name, kind, len(held.files), held.size(), keyid, url, held.node.host,
            existing=True,
        )  # fmt: skip
    parent = envs.user_cache() / "captures"
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="capture-", dir=parent))
    try:
        prepared = prepare(  # as serve prepares the same source (a recipe file's own folder)
            source,
            tiers,
            cache_root=root,
            serving_args=serving_args,
            workdir=workdir,
            policy=policy,
            additions=False,
            record=False,
        )
        if prepared.manifest != digest:
            raise UserError(
                f"{source.ref or source.recipe} moved to {prepared.manifest} while capturing "
                f"for {digest}; nothing was published: run capture again"
            )
        before = set(root.rglob("*"))
        code, output = start_for(prepared.argv, prepared.env, prepared.cwd, timeout, READY)
        tail = (output.strip().splitlines() or ["(no output)"])[-1][:200]
        if not (code == 0 or (code is None and READY in output)):
            how = f"exited {code}" if code is not None else f"did not serve in {timeout:g} s"
            raise UserError(f"vLLM {how} (last line: {tail}); nothing was published")
        found = written(root, before, paths)
        if not found:
            raise UserError(
                f"vLLM served but wrote no {kind} under {root} (is TORCH_CACHING_PRECOMPILE=0 "
                "set on this node?); nothing was published"
            )
        return _publish(tiers, manifest.name, digest, kind, root, found, engine, recipe, signer)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _publish(
    tiers: TieredStore,
    name: str,
    digest: str,
    kind: str,
    root: Path,
    found: list[str],
    engine: Engine,
    recipe: Recipe,
    signer: Signer | None,
) -> Captured:
    """Store ``found`` (under ``root``) as blobs, then the addition's object (record last)."""
    from neuronbuild.attest.additions import seal_addition
    from neuronbuild.store.additions import NodeIdentity, addition_statement

    store = tiers.remote or tiers.local
    hashed = store.put_files([root / p for p in found])
    files = [
        FileRecord(p, d, n, os.access(root / p, os.X_OK))
        for p, (d, n) in zip(found, hashed, strict=True)
    ]
    host = socket.gethostname()
    node = NodeIdentity(
        recipe.target,
        node_builds(engine),
        host,
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    addition, data = seal_addition(addition_statement(name, digest, kind, node, files), signer)
    store.put_addition(digest, addition, data)
    keyid = str(signer.public_key.keyid) if signer is not None else None
    url = store.url_of(store.layout.addition(digest, addition))
    total = sum(f.size for f in files)
    return Captured(digest, addition, kind, len(files), total, keyid, url, host)
