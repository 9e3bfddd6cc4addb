"""``neuronbuild probe``: a running server proves it serves the build CI tested (issue 45 items
3-4).

CI, once it has a server up on a build, records that server's answers to the fixed requests
(``--record``: :class:`~neuronbuild.node.probe.ProbeRecord`, beside the manifest in the store).
A node, once its server is up, asks the same requests and compares, and checks that the server
compiled nothing since it started: the lay-out still holds every file of the build as ``serve``
laid it out (its stamp: a compile in place rewrites an entry) and the compile cache holds no entry
the build lacks (:func:`~neuronbuild.node.probe.compiled_since`). When both
hold it writes a receipt beside the build (:mod:`neuronbuild.attest.receipts`): what this node
served and proved. Anything else raises :class:`~neuronbuild.errors.ProbeFailed` (exit 1), so a
Kubernetes startup probe keeps traffic away.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from neuronbuild.attest.receipts import receipt_bytes, receipt_statement
from neuronbuild.engines.registry import engine_for
from neuronbuild.errors import ProbeFailed, UserError
from neuronbuild.human import count
from neuronbuild.node.image_stamp import check_image
from neuronbuild.node.materialize import laid_out, read_stamp_value
from neuronbuild.node.probe import ProbeRecord, ask, compiled_since, differences
from neuronbuild.node.weights import differences_here
from neuronbuild.store.layout import node_layout_root
from neuronbuild.store.tiered import TieredStore

from .serve import ServeSource, resolve

if TYPE_CHECKING:
    from securesystemslib.signer import Signer

    from neuronbuild.attest.policy import Policy


@dataclass(frozen=True)
class Probed:
    """What a probe found: the ``manifest`` served, the ``root`` it is laid out in, the
    ``answers`` compared (or recorded), and the ``receipt`` written (its name; None when
    recording, or with ``receipt=False``)."""

    manifest: str
    root: Path
    answers: int
    recorded: bool
    receipt: str | None
    store: str

    def to_json(self) -> dict[str, Any]:
        return {
            "manifest": self.manifest,
            "vllm_cache_root": str(self.root),
            "n_answers": self.answers,
            "recorded": self.recorded,
            "receipt": self.receipt,
            "store": self.store,
        }

    def line(self) -> str:
        """What ``probe`` prints."""
        if self.recorded:
            return (
                f"recorded {count(self.answers, 'answer')} of the server for {self.manifest} "
                f"in {self.store}; nodes probe against them"
            )
        receipt = f"; receipt {self.receipt} in {self.store}" if self.receipt else ""
        return (
            f"probe holds: {count(self.answers, 'answer')} as CI's, nothing compiled since the "
            f"server started ({self.manifest}){receipt}"
        )


def probe(
    source: ServeSource,
    tiers: TieredStore,
    url: str,
    *,
    cache_root: Path | None = None,
    record: bool = False,
    receipt: bool = True,
    ref: str | None = None,
    signer: Signer | None = None,
    force: bool = False,
    policy: Policy | None = None,
    workdir: Path | None = None,
) -> Probed:
    """Probe the server at ``url`` serving ``source``'s manifest, laid out in ``cache_root``
    (default: where ``serve`` lays it out, :func:`~neuronbuild.store.layout.node_layout_root`).
    ``record``: store the server's answers as CI's instead of comparing (no receipt); other
    answers recorded before are kept (UserError) unless ``force``. ``policy``: the trust policy
    the manifest must pass, as ``serve`` enforces it. ``workdir``: where the model folder
    resolves, as ``serve --workdir`` (the receipt says whether the node's weights are the
    build's).
    ``receipt``: write a receipt to the store when the probe holds (:mod:`neuronbuild.attest.
    receipts`), signed by ``signer`` (the node's key) when given; ``ref``: the ref it names.

    Raises:
        ProbeFailed: the lay-out no longer holds the build as laid out, the server compiled since
            it started, or it answers otherwise than CI did.
        UserError: no such ref or manifest, no answers recorded for it (nothing to compare),
            the server did not answer, or a malformed record (StoreDataInvalid).
        StoreError: the store failed.
    """
    recipe, manifest, digest, _ = resolve(source, tiers, policy)
    root = cache_root or node_layout_root(digest)
    engine = engine_for(recipe)
    folder, bookkeeping = engine.compile_cache, engine.load_bookkeeping

    def compiled_nothing(since: str) -> None:
        if not (check_image(root, manifest, digest) or laid_out(root, manifest, digest)):
            held = read_stamp_value(root)
            other = held.get("manifest") if isinstance(held, dict) else None
            if isinstance(other, str) and other != digest:
                raise ProbeFailed(
                    f"{root} holds {other[:80]!a}, not {digest}: the server serves the build "
                    f"{source.ref or 'it'} named when it started; start it again to serve {digest}"
                )
            raise ProbeFailed(
                f"{root} does not hold {digest} as serve laid it out: a file of it was rewritten "
                "or removed since (a compile rewrites its entry), or it was laid out elsewhere "
                "(pass the --vllm-cache-root serve used)"
            )
        compiled = compiled_since(root, manifest, Path(folder), bookkeeping) if folder else []
        if compiled:
            raise ProbeFailed(
                f"the server compiled since {since}: {count(len(compiled), 'file')} under {root} "
                f"that {digest} does not hold (first: {compiled[0]}); serve with compilation "
                "forbidden (neuronbuild serve), from a build that holds every graph"
            )

    compiled_nothing("it started")
    store = tiers.remote or tiers.local
    if record:
        answers = ask(url)
        compiled_nothing("it was asked")  # the build lacks what its requests need
        store.put_probe(digest, ProbeRecord(digest, tuple(answers)).to_bytes(), replace=force)
        return Probed(digest, root, len(answers), True, None, store.url)
    data = store.get_probe(digest)
    if data is None:
        raise UserError(
            f"{store.url}: no answers recorded for {digest}; in CI, with a server up on the "
            f"build, run `neuronbuild probe --manifest {digest} --record --url URL`"
        )
    wanted = ProbeRecord.from_bytes(data, f"{store.url}: the probe record of {digest}")
    if wanted.manifest != digest:
        raise UserError(f"{store.url}: the probe record of {digest} names {wanted.manifest}")
    answers = ask(url, [a.prompt for a in wanted.answers], wanted.max_tokens)
    compiled_nothing("it was asked")
    found = differences(wanted, answers)
    if found:
        more = f" (and {count(len(found) - 1, 'other prompt')})" if len(found) > 1 else ""
        raise ProbeFailed(
            f"the server at {url} does not answer as CI's did for {digest}: {found[0]}{more}; "
            "it serves another model, weights or configuration than the build's"
        )
    written = None
    if receipt:
        revision = recipe.engine_args.get("revision")
        here = workdir or recipe.workdir
        weights = differences_here(recipe.model, revision, here, manifest.weights)
        checked = None if weights is None else not weights[1]  # --allow-mismatch weights: False
        told = receipt_statement(
            recipe, manifest, digest, ref=ref, answers=len(answers), weights_checked=checked
        )
        written = store.put_receipt(digest, receipt_bytes(told, signer))
    return Probed(digest, root, len(answers), False, written, store.url)
