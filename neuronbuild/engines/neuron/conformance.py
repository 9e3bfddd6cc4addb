"""The conformance kit's checks: each settles one row of reference/vllm-neuron-fidelity.md that only
a real compile host or a real Neuron node can settle, from evidence gathered elsewhere
(``neuronbuild_runtime.conformance``), as a :class:`Check` a user pastes into a bug report.

Pure functions of what was seen: no store, no process, no file system. Each names its row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from neuronbuild.engines.neuron.coverage import complete_entries
from neuronbuild.engines.neuron.releases import Rules, identify, resolve
from neuronbuild.engines.versions import pin_matches, public_version
from neuronbuild.human import count

Status = Literal["PASS", "FAIL", "SKIP"]

LEVEL = re.compile(r"(?:^|\s)-O(\d)(?:\s|$)")
"""``-O<level>`` as vLLM-Neuron's ``load_model`` adds it to neuronx-cc's arguments, saved in an
entry's ``command.txt`` (``neuroncc_compile``, vllm-neuron ``compile/backend.py``; fidelity row
B10)."""

MISS = "local compile cache miss"
"""What the plugin raises on a miss with ``VLLM_NEURON_DISABLE_WARMUP_COMPILE=1`` (F1
``compile/backend.py`` ``compile``; fidelity row C1)."""


@dataclass(frozen=True)
class Check:
    """One row of the kit's table: ``row`` the fidelity row it settles, ``what`` it checked,
    ``status`` PASS / FAIL / SKIP, ``why`` one line for a FAIL or SKIP (empty on a PASS) and
    ``evidence`` what was seen (versions, paths, levels, counts) as ``name -> text``."""

    row: str
    what: str
    status: Status
    why: str = ""
    evidence: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "row": self.row,
            "what": self.what,
            "status": self.status,
            "why": self.why,
            "evidence": dict(self.evidence),
        }


def check_versions(pins: Mapping[str, str], installed: Mapping[str, str | None]) -> Check:
    """Row B12: each pinned distribution is installed here at a version its pin matches (on the
    public version unless the pin carries a local label, :func:`pin_matches`). Evidence: every
    installed string as the host reports it, label included."""
    what = "installed version strings match the recipe's toolchain pins"
    evidence = {d: installed.get(d) or "(not installed)" for d in sorted(pins)}
    bad = [d for d in sorted(pins) if not pin_matches(pins[d], installed.get(d))]
    if bad:
        why = "; ".join(f"{d} pinned {pins[d]}, installed {evidence[d]}" for d in bad)
        return Check("B12", what, "FAIL", why, evidence)
    return Check("B12", what, "PASS", "", evidence)


def check_release(pins: Mapping[str, str], installed: Mapping[str, str | None]) -> Check:
    """Row R1: the Neuron SDK release the installed versions name (``releases.identify``) is the
    one the recipe's pins name, so the host runs the rules the build was planned by. Evidence:
    both releases and the rule set. SKIP when the pins name no release of the table (its rules
    are the nearest release's: report the installed set to add it)."""
    what = "the installed Neuron SDK release is the one the pins name"
    found = resolve(pins)
    here = identify({d: public_version(v) for d, v in installed.items() if v is not None})
    evidence = {
        "pinned": found.release.name if found.release else "(none of the table)",
        "installed": here.name if here else "(none of the table)",
        "rules": found.rules.summary,
    }
    if found.release is None:
        why = (
            f"the pins name no release neuronbuild knows; planned by Neuron {found.nearest.name}'s"
        )
        return Check("R1", what, "SKIP", why + " rules", evidence)
    if here is not found.release:
        why = f"pinned Neuron {found.release.name}, installed {evidence['installed']}"
        return Check("R1", what, "FAIL", why, evidence)
    return Check("R1", what, "PASS", "", evidence)


def check_route(rules: Rules, built: str | None, node: str | None) -> Check:
    """Row R2: the compile route the build was keyed with (``built``: its keyed
    ``VLLM_NEURON_BACKEND``, None when unset or the default) is one the release names; serve
    gives vLLM that value (or names the default route), whatever ``node`` sets. Evidence: both
    values and the route. SKIP for a release that publishes no values (0.24)."""
    what = "the build's compile route is one the release names"
    route = rules.route(built)
    evidence = {
        "built with": built or "(default)",
        "this host": node or "(unset)",
        "route": route or "(not named)",
    }
    if not rules.routes:
        return Check("R2", what, "SKIP", "this release publishes no route values", evidence)
    if route is None:
        named = ", ".join(sorted(rules.routes))
        why = f"built with VLLM_NEURON_BACKEND={built}, which the release's pages do not name"
        why += f" ({named})"
        return Check("R2", what, "FAIL", why, evidence)
    return Check("R2", what, "PASS", "", evidence)


def check_precompile_cache(
    rules: Rules, env: Mapping[str, str], written: Sequence[str], served: bool, tail: str
) -> Check:
    """Row R3: a node start with the Precompile Cache on writes it. On when the release has one,
    ``VLLM_NEURON_BACKEND`` names the default route explicitly (serve sets it) and
    ``TORCH_CACHING_PRECOMPILE`` is not ``0`` (how-to-precompile-cache.md, v2.33.0, 2026-10-13).
    ``written``: the files the start added under the layout root beside the compile cache (their
    layout is on no page we could read); ``served``: whether the start came up; ``tail``: its
    last output line. SKIP when the cache is off; evidence: whether it is on, and what was
    written."""
    what = "a node start with the Precompile Cache on writes it"
    value = (env.get("VLLM_NEURON_BACKEND") or "").strip()
    on = (
        rules.precompile_cache
        and bool(value)
        and rules.route(value) == rules.default_route
        and env.get("TORCH_CACHING_PRECOMPILE", "1").strip() != "0"
    )
    folders = sorted({"/".join(p.split("/")[:2]) for p in written})
    where = f" under {', '.join(folders)}" if folders else ""
    evidence = {"on": "yes" if on else "no", "written": count(len(written), "file") + where}
    if not served:
        return Check("R3", what, "FAIL", f"the start did not come up: {tail}", evidence)
    if not on:
        why = "the release has no Precompile Cache, or this start turns it off"
        return Check("R3", what, "SKIP", why, evidence)
    if not written:
        return Check(
            "R3", what, "FAIL", "the start wrote nothing beside the compile cache", evidence
        )
    return Check("R3", what, "PASS", "", evidence)


def entry_names(paths: Sequence[str], prefix: str) -> set[str]:
    """The folders directly under ``prefix`` (``neuron/compile_cache``) that ``paths`` hold files
    of, a dot name (NKI's carried copies, the ``nki`` cache) excepted."""
    found = set()
    for path in paths:
        rest = path.removeprefix(prefix + "/")
        if rest != path and "/" in rest and not rest.startswith((".", "nki/")):
            found.add(rest.split("/", 1)[0])
    return found


def check_layout(paths: Sequence[str], prefix: str, metadata_keys: Mapping[str, str]) -> Check:
    """Rows B2/B3: every graph entry of the manifest (``paths``, relative to the cache root) holds
    the plugin's complete set (``graph.hlo``, ``graph_<key>.neff``, ``.compilation_complete``, an
    ``.artifact_metadata_v*.json``; :func:`complete_entries`) and its metadata's ``cache_key``
    (``metadata_keys``: entry -> key read) names its own folder (``_is_cache_complete``,
    Infinity-AI-Institute/vllm-neuron ``vllm_neuron/compile/cache.py`` @7f4cca75)."""
    what = "every entry holds graph.hlo, its NEFF, metadata and .compilation_complete"
    entries = entry_names(paths, prefix)
    complete = complete_entries(paths)
    incomplete = sorted(entries - complete)
    wrong = sorted(e for e, k in metadata_keys.items() if k != e)
    evidence = {"entries": str(len(entries)), "complete": str(len(complete & entries))}
    if not entries:
        return Check("B2", what, "FAIL", "the manifest holds no graph entry", evidence)
    if incomplete or wrong:
        parts = [f"incomplete: {', '.join(incomplete)}"] if incomplete else []
        parts += (
            [f"metadata cache_key differs from its folder: {', '.join(wrong)}"] if wrong else []
        )
        return Check("B2", what, "FAIL", "; ".join(parts), evidence)
    return Check("B2", what, "PASS", "", evidence)


def check_optimization_level(expected: int, commands: Mapping[str, str]) -> Check:
    """Row B10: the level every entry was compiled at (``-O<N>`` in its ``command.txt``,
    ``commands``: entry -> text) is the one serve resolves: the recipe's explicit
    ``optimization_level``, else vLLM-Neuron's O1 (``apply_config_platform_defaults``). SKIP
    when no entry records its compiler command."""
    what = "entries were compiled at the optimization level serve resolves"
    levels = {e: m.group(1) for e, t in commands.items() if (m := LEVEL.search(t))}
    evidence = {
        "expected": f"-O{expected}",
        "seen": ", ".join(sorted({f"-O{v}" for v in levels.values()})),
    }
    if not levels:
        why = (
            "no entry's command.txt names an -O level; compare the levels in the serve log by hand"
        )
        return Check("B10", what, "SKIP", why, evidence)
    wrong = sorted(e for e, v in levels.items() if int(v) != expected)
    if wrong:
        shown = ", ".join(wrong[:6])
        differ = "differs" if len(wrong) == 1 else "differ"
        of = count(len(levels), "entry", "entries")
        why = f"{len(wrong)} of {of} {differ} from -O{expected}: {shown}"
        return Check("B10", what, "FAIL", why, evidence)
    return Check("B10", what, "PASS", "", evidence)


def check_nki_paths(refs: Mapping[str, Sequence[str]], carried: set[str], root: str) -> Check:
    """Row B7: each NKI kernel binary a graph's ``graph.hlo`` names under the intermediate root
    (``refs``: entry -> relative paths) travels in the manifest (``carried``: relative paths of
    the carried copies), so the node finds it at the same absolute path (kiln
    ``kiln/compile_cache.py``, ``NCC_EVRF059`` measured on SDK 2.32). SKIP when no graph calls
    an NKI kernel."""
    what = f"every NKI kernel binary the graphs name under {root} is carried"
    named = {p for paths in refs.values() for p in paths}
    missing = sorted(named - carried)
    evidence = {"named": str(len(named)), "carried": str(len(named & carried))}
    if not named:
        return Check("B7", what, "SKIP", "no graph references an NKI kernel binary", evidence)
    if missing:
        shown = ", ".join(f"{root}/{p}" for p in missing[:6])
        return Check("B7", what, "FAIL", f"not carried: {shown}", evidence)
    return Check("B7", what, "PASS", "", evidence)


LOADED = re.compile(r"\b(\d+) graphs? loaded\b")
"""How a runtime that counts them says how many graphs a start loaded (the test double does)."""

START_WHAT = "the complete build serves: ready in time, nothing compiled, every graph loaded"


class WholeStartOutcome(Protocol):
    """How the start of a whole build ended (``runtime.conformance.WholeStart``)."""

    @property
    def served(self) -> bool: ...
    @property
    def code(self) -> int | None: ...
    @property
    def compiled(self) -> list[str]: ...
    @property
    def output(self) -> str: ...
    @property
    def seconds(self) -> float: ...
    @property
    def tail(self) -> str: ...


def check_whole_start(start: WholeStartOutcome, planned: int) -> Check:
    """Row S0, run on a node before any negative check (C1 proves nothing if the complete build
    cannot start either): a start of the whole build served within the time limit, wrote no
    compile output into the compile cache (``start.compiled``) and, where the runtime says how
    many graphs it loaded (:data:`LOADED`), loaded all ``planned``."""
    counted = LOADED.findall(start.output)
    loaded = int(counted[-1]) if counted else None
    compiled = start.compiled
    evidence = {
        "exit": "still running (ready)" if start.code is None else str(start.code),
        "seconds": f"{start.seconds:.1f}",
        "compiled files": str(len(compiled)),
        "graphs loaded": "not reported by the runtime" if loaded is None else str(loaded),
        "graphs planned": str(planned),
    }
    if not start.served and start.code is None:
        why = f"it was not ready within the time limit: {start.tail}"
        return Check("S0", START_WHAT, "FAIL", why, evidence)
    if not start.served:
        why = f"it exited with {start.code}: {start.tail}"
        return Check("S0", START_WHAT, "FAIL", why, evidence)
    if compiled:
        why = f"it compiled at start ({count(len(compiled), 'file')}, e.g. {compiled[0]})"
        return Check("S0", START_WHAT, "FAIL", why, evidence)
    if loaded is not None and loaded != planned:
        why = f"it loaded {loaded} of the {planned} planned graphs"
        return Check("S0", START_WHAT, "FAIL", why, evidence)
    return Check("S0", START_WHAT, "PASS", "", evidence)


@dataclass(frozen=True)
class StartOutcome:
    """How one serve start ended: ``code`` its exit status (None: still running at the time
    limit, so it was compiling or serving), ``output`` its stdout and stderr, ``seconds`` how
    long it ran, ``removed`` the entry taken out first."""

    code: int | None
    output: str
    seconds: float
    removed: str


def check_removed_entry(outcome: StartOutcome) -> Check:
    """Row C1: serve with one entry removed fails at start, with the plugin's miss error for that
    entry's key (its folder's name: "local compile cache miss for key <key>"), instead of
    compiling it (``VLLM_NEURON_DISABLE_WARMUP_COMPILE=1``; the LNL-era reader is not visible in
    public sources, so only a device settles it). A miss of another key is a FAIL: the build
    lacked more than the entry the kit removed."""
    what = "serve with one entry removed fails at start instead of compiling"
    evidence = {
        "removed": outcome.removed,
        "exit": "still running" if outcome.code is None else str(outcome.code),
        "seconds": f"{outcome.seconds:.1f}",
    }
    tail = outcome.output.strip().splitlines()[-1:] or [""]
    if outcome.code is None:
        why = "still running at the time limit: the node compiled or served without the entry"
        return Check("C1", what, "FAIL", why, evidence)
    if outcome.code == 0:
        return Check("C1", what, "FAIL", "serve started without the entry", evidence)
    misses = [line for line in outcome.output.splitlines() if MISS in line]
    if not misses:
        return Check("C1", what, "FAIL", f"failed, but not with a cache miss: {tail[0]}", evidence)
    if not any(outcome.removed in line for line in misses):
        why = f"failed on a miss of another entry than the one removed: {misses[0].strip()}"
        return Check("C1", what, "FAIL", why, evidence)
    return Check("C1", what, "PASS", "", evidence)


def skipped(row: str, what: str, why: str) -> Check:
    """A check that cannot run here, with the reason."""
    return Check(row, what, "SKIP", why)
