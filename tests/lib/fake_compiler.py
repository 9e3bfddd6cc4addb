"""A test double of an engine's compile half: each unit's "compile" is a real subprocess (so the
scheduler's process groups, logs, timeouts and exit codes are exercised) that writes one entry
folder into its scratch cache and a completion marker last, as vLLM-Neuron does. What each unit
does is chosen by graph label: succeed, fail with an exit code, hang, or leave an entry without
its marker. Test code only: the product never compiles with it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from neuronbuild.engines.compiler import CompileRun, EngineCommand, UnitCompiler

if TYPE_CHECKING:
    import pytest


MARKER = ".compilation_complete"

WORKER = r"""
import os, sys, time
root, entry, behaviour = sys.argv[1], sys.argv[2], sys.argv[3]
print(f"fake compile of {entry}: {behaviour}", flush=True)
folder = os.path.join(root, "fake", entry)
os.makedirs(folder, exist_ok=True)
with open(os.path.join(folder, "graph.neff"), "wb") as f:
    f.write(entry.encode() * 100)
if behaviour == "spawn":  # a compiler process of its own that runs on, as neuronx-cc's do
    import subprocess
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    print("compiler process started", flush=True)
if behaviour in ("session", "leave"):  # compile workers in a session of their own (setsid)
    import subprocess
    stays = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    for i in range(2):  # "leave": one in the engine's group too, ignoring SIGTERM as helpers may
        subprocess.Popen([sys.executable, "-c", stays if behaviour == "leave" else "import time; time.sleep(300)"],
                         start_new_session=behaviour == "session" or i == 0)
    if behaviour == "leave":
        time.sleep(1)  # the helpers have ignored SIGTERM by now
    print("compiler process started", flush=True)
if behaviour in ("hang", "spawn", "session"):
    time.sleep(300)
if behaviour.startswith("sleep"):  # a long compile that keeps printing, as neuronx-cc does
    end, step = time.monotonic() + float(behaviour[5:]), 0
    while time.monotonic() < end:
        step += 1
        print(f"compiling step {step}", flush=True)
        time.sleep(0.1)
if behaviour.startswith("exit"):
    print("neuronx-cc: compilation failed", file=sys.stderr, flush=True)
    sys.exit(int(behaviour[4:]))
if behaviour != "incomplete":
    open(os.path.join(folder, ".compilation_complete"), "w").close()
"""


class FakeCompiler(UnitCompiler):
    """``behaviour``: graph label -> ``ok`` (default), ``exitN``, ``hang``, ``spawn`` (start a
    compiler process that hangs, then hang), ``session`` (start two that hang in sessions of
    their own, then hang), ``leave`` (start two that hang, one in its own session, one in the
    group, then succeed at once), ``incomplete`` or ``sleepS`` (print ``compiling step N`` every
    0.1 s for S seconds, then succeed).
    ``started`` collects the labels of the units it was asked to compile, in order."""

    cache_dir: ClassVar[Path] = Path("fake")

    def __init__(self, behaviour: dict[str, str] | None = None) -> None:
        self.behaviour = behaviour or {}
        self.started: list[str] = []

    @staticmethod
    def installed_versions(distributions: list[str]) -> dict[str, str | None]:
        from tests.lib.builders import NEURON_TOOLCHAIN

        return {d: NEURON_TOOLCHAIN.get(d) for d in distributions}

    def run_command(self, run: CompileRun) -> EngineCommand:
        recipe, unit, cache_root = run.recipe, run.unit, run.cache_root
        label = unit.label()
        self.started.append(label)
        behaviour = self.behaviour.get(label, "ok")
        argv = [sys.executable, "-c", WORKER, str(cache_root), unit.key.hex[:16], behaviour]
        return EngineCommand(argv, dict(os.environ), recipe.workdir)

    def harvest(self, cache_root: Path) -> list[Path]:
        entries = sorted(p for p in (cache_root / "fake").glob("*") if (p / MARKER).is_file())
        if not entries:
            raise RuntimeError(f"no complete entry under {cache_root}")
        return [p.relative_to(cache_root) for e in entries for p in sorted(e.rglob("*"))]


def use_fake_compiler(monkeypatch: pytest.MonkeyPatch) -> FakeCompiler:
    """A :class:`FakeCompiler` that every neuron engine compiles with until ``monkeypatch``
    undoes it (the end of the test)."""
    from neuronbuild.engines.neuron.engine import NeuronEngine

    fake = FakeCompiler()
    monkeypatch.setattr(NeuronEngine, "compiler", lambda self: fake)
    return fake
