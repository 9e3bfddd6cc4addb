"""The node picks its build from an index (:mod:`neuronbuild.store.index`).

A ref may name an index: the builds of one recipe family, each labelled with what a node must
have to serve it. The node reads its own facts, the installed versions as the wheels report them
(:func:`~neuronbuild.engines.versions.installed_version`) and what each entry's engine checks of
the machine (:meth:`~neuronbuild.engines.base.Engine.node_differences`: the Neuron device family
and its system packages, the CPU instruction set), and serves the one entry with no difference.
When none fits, one table lists every entry, compatible or not and why (as NVIDIA NIM lists a
model's profiles), exit 2. Two entries that both fit are refused at seal
(:func:`neuronbuild.orchestrate.family.check_told_apart`); two that fit one node anyway are
refused here too, never guessed between.

After the pick the picked build goes through every check a plain manifest does
(:mod:`.serve_checks`): installed builds, model files, weights, coverage, trust.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from neuronbuild.digest import short
from neuronbuild.engines.registry import describe_labels, get_engine
from neuronbuild.engines.versions import installed_version, pin_matches
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.human import count, format_table
from neuronbuild.store.index import Index, IndexEntry

from .node_checks import NOT_INSTALLED, NodeMismatch


def differences(labels: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(name, built for, this node)`` for each way this node differs from an entry's
    ``labels``: a pinned distribution not installed at its version, then the engine's own
    checks of the machine. Empty: the entry fits."""
    toolchain = dict(labels.get("toolchain", {}))
    found = [
        (dist, pin, installed or NOT_INSTALLED)
        for dist, pin in sorted(toolchain.items())
        if not pin_matches(pin, installed := installed_version(dist))
    ]
    try:
        engine = get_engine(str(labels.get("engine")))
    except KeyError:
        return [*found, ("engine", str(labels.get("engine")), "unknown to this neuronbuild")]
    return found + engine.node_differences(dict(labels))


@dataclass(frozen=True)
class Picked:
    """The entry this node serves of ``index`` (named ``digest``), and why: ``line`` says which
    build, what it was built for and that this node has it; ``others``: the entries that do
    not fit, each with its first difference."""

    digest: str
    entry: IndexEntry
    entries: int
    others: tuple[tuple[str, str], ...]

    @property
    def line(self) -> str:
        """One line: which build of the index and why."""
        verb = "does" if len(self.others) == 1 else "do"
        rest = f"; {count(len(self.others), 'other build')} {verb} not fit" if self.others else ""
        return (
            f"index {short(self.digest)} ({count(self.entries, 'build')}): serving "
            f"{self.entry.manifest}, built for {describe_labels(self.entry.labels)}, which this "
            f"node has{rest}"
        )

    def to_json(self) -> dict[str, Any]:
        """``serve --json``'s ``index``."""
        return {
            "index": self.digest,
            "picked": self.entry.manifest,
            "labels": self.entry.labels,
            "not_fitting": [{"manifest": m, "why": why} for m, why in self.others],
        }


def _why(found: list[tuple[str, str, str]]) -> str:
    return "; ".join(f"{name} {built} (this node: {here})" for name, built, here in found)


def pick(index: Index, digest: str, ref: str, allow: tuple[str, ...] = ()) -> Picked:
    """The one entry of ``index`` (named ``digest``, reached through ``ref``) this node fits;
    failing any, the one entry whose differences are all in ``allow`` (``--allow-mismatch``,
    which the picked build's node check then reports loudly).

    Raises:
        NodeMismatch: no entry fits (or several only as allowed); the message is the table of
            every entry (exit 2).
        StoreDataInvalid: more than one fits exactly (seal refuses such an index where its
            labels tell, :func:`~neuronbuild.orchestrate.family.told_apart`; a node with two
            vLLM builds installed, or an index written by hand, still meets this).
    """
    rows = [(e, differences(e.labels)) for e in index.entries]
    exact = [e for e, found in rows if not found]
    if len(exact) > 1:
        raise StoreDataInvalid(
            f"{ref} names index {digest}, of which {count(len(exact), 'build')} fit this "
            f"node ({', '.join(short(e.manifest) for e in exact)}), so it cannot pick; serve "
            "one by its digest (--manifest), or seal the index again without the other"
        )
    allowed = [e for e, found in rows if found and all(name in allow for name, _, _ in found)]
    fitting = exact or allowed
    if len(fitting) == 1:
        others = tuple((e.manifest, _why(found)) for e, found in rows if e is not fitting[0])
        return Picked(digest, fitting[0], len(index.entries), others)
    table = [["BUILD", "BUILT FOR", "THIS NODE", "WHY NOT"]] + [
        [short(e.manifest), describe_labels(e.labels), "incompatible", _why(found)]
        for e, found in rows
    ]
    lines = "\n".join(format_table(table, indent="  "))
    several = (
        f"; --allow-mismatch lets {count(len(allowed), 'build')} fit, so none is picked: "
        "allow fewer differences"
        if allowed
        else ""
    )
    raise NodeMismatch(
        f"{ref} names index {short(digest)} of {count(len(rows), 'build')}, none of which this "
        f"node can serve{several}:\n{lines}\nserve on a node that matches one, or compile the "
        "recipe for this one and seal it into the index (compile --index)"
    )
