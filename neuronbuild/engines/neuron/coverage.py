"""Which graphs of a neuron plan a manifest covers, read from its unit records alone (no blob is
fetched): the neuron engine's half of :mod:`neuronbuild.engines.coverage`."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from neuronbuild.engines.neuron.nki import COMPILE_CACHE, SHARED_DIRS
from neuronbuild.human import count

if TYPE_CHECKING:
    from neuronbuild.engines.coverage import Needed
    from neuronbuild.store.records import UnitRecord

METADATA = re.compile(r"^\.artifact_metadata_v\d+\.json$")


def complete_entries(paths: Iterable[str]) -> set[str]:
    """The entries (folder names under ``neuron/compile_cache``) of ``paths`` that hold every
    file of vLLM-Neuron's completeness rule: ``graph.hlo``, ``graph_<key>.neff``,
    ``.compilation_complete`` and an ``.artifact_metadata_v*.json`` (``_is_cache_complete``,
    Infinity-AI-Institute/vllm-neuron ``vllm_neuron/compile/cache.py`` @7f4cca75; fidelity row
    B2). The metadata's ``cache_key`` is checked at load; here only its presence is."""
    names: dict[str, set[str]] = defaultdict(set)
    prefix = PurePosixPath(COMPILE_CACHE.as_posix())
    for path in paths:
        rel = PurePosixPath(path)
        if rel.is_relative_to(prefix) and len(rel.relative_to(prefix).parts) == 2:
            entry, name = rel.relative_to(prefix).parts
            names[entry].add(name)
    return {
        entry
        for entry, files in names.items()
        if entry not in SHARED_DIRS
        and {"graph.hlo", f"graph_{entry}.neff", ".compilation_complete"} <= files
        and any(METADATA.match(n) for n in files)
    }


def phase_gaps(needed: Needed, held: Sequence[UnitRecord]) -> list[str]:
    """Per phase of ``needed``: each graph no held record of that phase lists (by shape, as the
    record's graphs name them), then, where all are listed, a count of complete entries below
    the phase's graph count (the plugin's entries record no bucket shape, so one entry per graph
    is what can be checked). One line per gap."""
    gaps: list[str] = []
    for phase, graphs in needed:
        units = [u for u in held if u.factors.get("phase") == phase]
        listed = {g.identity for u in units for g in u.graphs}
        missing = [g for g in graphs if g.identity not in listed]
        gaps += [f"{phase} graph {g.label()} missing" for g in missing]
        entries = complete_entries(f.path for u in units for f in u.files)
        if not missing and len(entries) < len(graphs):
            gaps.append(
                f"{phase} phase has {count(len(entries), 'complete entry', 'complete entries')}"
                f" for {count(len(graphs), 'graph')}"
            )
    return gaps
