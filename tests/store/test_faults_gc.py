"""Refs and gc under kills and skewed clocks (issue 19): gc killed at each of its steps while a ref
move races it, a move whose intent predates gc's mark, a gc host two days ahead, a history writer
a minute slow; real folder stores and moto's S3 server, real processes where a kill is the fault.
"""

from __future__ import annotations

import itertools
import json
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import StoreError
from neuronbuild.store.cas import CONDEMNED_SECONDS, Store
from neuronbuild.store.gc import DAY, collect_garbage
from neuronbuild.store.records import RefMove
from tests.lib.builders import cpu_recipe, publish_build, stored_unit
from tests.lib.claims import age, audit, fresh_url, s3_root
from tests.lib.commands import neuronbuild as nb

__all__ = ["s3_root"]  # the module-scoped moto server fixture

GC_STEPS = ("marked", "condemned", "spared", "deleted", "swept")
MOVER_PHASES = 4
"""A ref move's pieces between its pauses: read the ref | write its intent | refuse a condemned or
missing manifest | swap the ref."""


def orphaned_store(tmp_path: Path) -> tuple[Store, str, str]:
    """A folder store two days old: ``tiny/latest`` at a live build, and an old build no ref
    (nor any history) reaches any more, which gc sweeps. Returns the store, live, orphan."""
    store = Store(str(tmp_path / "store"), create=True)
    orphan = publish_build(store, cpu_recipe(cpu_isa="host", name="old"), tmp_path, "a")
    live = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "b")
    store.backend.delete(store.layout.ref("old", "latest"))
    shutil.rmtree(store.layout.history("old", "latest"))
    age(Path(store.root), 2 * DAY)
    return store, live, orphan


def markers(store: Store) -> list[str]:
    return store.backend.find(store.layout.tmp("condemned"))


class GcDied(BaseException):
    """gc's death at a step (nothing after the step runs, as after a SIGKILL)."""


class PausedMove:
    """``mover.move_ref(name, tag, digest, None)`` in a thread that stops before each of its
    writes and checks, and goes on one piece (:data:`MOVER_PHASES`) per :meth:`advance`."""

    def __init__(self, mover: Store, name: str, tag: str, digest: str) -> None:
        self.go, self.paused = threading.Semaphore(0), threading.Semaphore(0)
        self.done = False
        self.error: BaseException | None = None
        backend = mover.backend
        for obj, attr in ((backend, "create"), (mover, "_condemned"), (backend, "swap")):
            setattr(obj, attr, self.pausing(getattr(obj, attr)))
        self.thread = threading.Thread(
            target=self.run, args=(lambda: mover.move_ref(name, tag, digest, None),), daemon=True
        )
        self.thread.start()

    def pausing(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def paused(*args: Any) -> Any:
            self.paused.release()
            self.go.acquire()
            return real(*args)

        return paused

    def run(self, move: Callable[[], None]) -> None:
        self.go.acquire()
        try:
            move()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done = True
            self.paused.release()

    def advance(self, pieces: int) -> None:
        for _ in range(pieces):
            if self.done:
                return
            self.go.release()
            assert self.paused.acquire(timeout=60)


def interleavings(kill: str | None) -> Iterator[tuple[int, ...]]:
    """Every way to spread the mover's pieces over the moments before gc, at each step gc
    reaches before it dies at ``kill`` (None: it finishes), and after it."""
    reached = GC_STEPS if kill is None else GC_STEPS[: GC_STEPS.index(kill) + 1]
    slots = len(reached) + 2
    for cuts in itertools.combinations_with_replacement(range(slots), MOVER_PHASES):
        yield tuple(cuts.count(s) for s in range(slots))


@pytest.mark.parametrize(
    "kill",
    [
        pytest.param(None, marks=pytest.mark.slow, id="finishes"),
        *GC_STEPS[:-1],
        pytest.param(GC_STEPS[-1], marks=pytest.mark.slow),
    ],
)
@pytest.mark.slow
def test_every_interleaving_of_a_ref_move_with_a_gc_killed_at_a_step_leaves_refs_complete(
    tmp_path: Path, kill: str | None
) -> None:
    """For gc dying at ``kill`` and each spread of a tag's pieces around gc's steps (a gc that
    dies at ``deleted`` has done all that protects refs: the slow tier adds the rest): the tag
    lands (and gc kept its manifest) or fails with one clean StoreError; every ref points at a
    complete, verified manifest; and a rerun of gc completes and leaves no marker behind."""
    template, _, orphan = orphaned_store(tmp_path / "template")
    outcomes: set[str] = set()
    for n, spread in enumerate(interleavings(kill)):
        root = tmp_path / f"s{n}"
        shutil.copytree(template.root, root)
        move = PausedMove(Store(str(root)), "old", "prod", orphan)
        slots = iter(spread)
        move.advance(next(slots))

        def at_step(
            step: str,
            kill: str | None = kill,
            slots: Iterator[int] = slots,
            move: PausedMove = move,
        ) -> None:
            move.advance(next(slots))
            if step == kill:
                raise GcDied

        with pytest.raises(GcDied) if kill else _nothing():
            collect_garbage(Store(str(root)), at_step=at_step)
        move.advance(MOVER_PHASES)
        store = Store(str(root))
        where = f"gc killed at {kill}, mover pieces {spread}: {move.error!r}"
        assert move.done and (move.error is None or isinstance(move.error, StoreError)), where
        assert audit(store) == [], where
        landed = store.get_ref("old", "prod")
        assert landed == (orphan if move.error is None else None), where
        said = str(move.error).rsplit(": ", 1)[-1]
        outcomes.add("landed" if landed else "unknown" if "unknown" in said else said)
        collect_garbage(store)
        assert audit(store) == [] and markers(store) == [], where
        assert store.has_manifest(orphan) == (landed is not None), where
    refused = f"gc is sweeping {orphan}; retry"
    # No marker before "condemned"; the manifest gone and its marker too only after "deleted".
    expected = {
        "marked": {"landed"},
        "swept": {"landed", refused, "unknown"},
        None: {"landed", refused, "unknown"},
    }
    assert outcomes == expected.get(kill, {"landed", refused})


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


KILLED_GC = """
import os, signal, subprocess, sys
from neuronbuild.transports.backends import FolderBackend
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
root, orphan = sys.argv[1], sys.argv[2]
real_list, real_delete = Store.manifest_digests, FolderBackend.delete
def listed(self):
    found = real_list(self)  # gc's mark: a tag moves a ref to the orphan meanwhile
    tag = [sys.executable, "-m", "neuronbuild", "tag", orphan, "old/prod", "--cache", root]
    subprocess.run(tag, check=True, capture_output=True)
    return found
def delete(self, path):
    real_delete(self, path)
    if "/manifests/" in path:
        os.kill(os.getpid(), signal.SIGKILL)
Store.manifest_digests, FolderBackend.delete = listed, delete
collect_garbage(Store(root))
"""


def test_gc_killed_after_deleting_a_manifest_a_tag_moved_to_during_its_mark_leaves_no_dangling_ref(
    tmp_path: Path,
) -> None:
    """Regression: gc deleted doomed manifests keeping their bytes in memory, then re-read the
    refs; a SIGKILL in between lost a manifest a tag had just moved a ref to. Now gc condemns,
    re-reads refs and intents, and deletes only what nothing names: the killing delete never
    comes."""
    store, _, orphan = orphaned_store(tmp_path)
    gc = subprocess.run(
        [sys.executable, "-c", KILLED_GC, store.root, orphan], capture_output=True, text=True
    )
    assert store.get_ref("old", "prod") == orphan, gc.stderr
    assert audit(store) == []
    collect_garbage(store)
    assert audit(store) == [] and markers(store) == []


@pytest.mark.parametrize("start", ["absent", "written without history"])
def test_a_move_whose_intent_predates_gc_lands_on_a_manifest_gc_kept(
    tmp_path: Path, start: str
) -> None:
    """Regression: a tag wrote its intent and found the manifest before gc's mark, then a whole
    gc ran (in another process) before its swap; gc read the intent as a dead writer's and
    swept the manifest, and the swap left the ref dangling. gc now spares what a young intent
    names, off the chain or at its head (a ref that got where it is without a recorded move,
    by hand or by an old version, puts the intent at the head; ``--keep-last 0``: history
    itself keeps nothing alive)."""
    store, live, orphan = orphaned_store(tmp_path)
    expected = None if start == "absent" else live
    if expected:
        store.backend.put(store.layout.ref("old", "prod"), f"{live}\n".encode())
    mover = Store(store.root)
    real_swap = mover.backend.swap

    def swap_after_a_gc(path: str, data: bytes, token: Any) -> None:
        ran = nb("gc", "--keep-last", "0", "--json", "--cache", store.root, process=True)
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["restored"] == [orphan], ran.stdout
        real_swap(path, data, token)

    mover.backend.swap = swap_after_a_gc  # type: ignore[method-assign]
    mover.move_ref("old", "prod", orphan, expected)
    assert audit(store) == []


def test_a_killed_gcs_marker_holds_moves_off_its_manifest_an_hour_at_most(tmp_path: Path) -> None:
    """gc SIGKILLed right after condemning: a tag to the condemned manifest fails, one line,
    exit 3; once the marker is older than CONDEMNED_SECONDS by the store's clock the tag lands,
    and the next gc removes the leftover marker of a manifest a ref now reaches."""
    store, _, orphan = orphaned_store(tmp_path)
    script = (
        "import os, signal, sys; from neuronbuild.store.cas import Store; "
        "from neuronbuild.store.gc import collect_garbage; "
        "collect_garbage(Store(sys.argv[1]), at_step=lambda s: s == 'condemned' and "
        "os.kill(os.getpid(), signal.SIGKILL))"
    )
    killed = subprocess.run([sys.executable, "-c", script, store.root])
    assert killed.returncode == -signal.SIGKILL
    left = markers(store)
    assert len(left) == 1 and store.has_manifest(orphan)
    refused = nb("tag", orphan, "old/prod", "--cache", store.root)
    assert refused.returncode == 3
    assert refused.stderr.strip().endswith(f"gc is sweeping {orphan}; retry")
    assert len(refused.stderr.strip().splitlines()) == 1
    age(Path(store.layout.tmp("condemned")), CONDEMNED_SECONDS + 60)
    landed = nb("tag", orphan, "old/prod", "--cache", store.root)
    assert landed.returncode == 0, landed.stderr
    assert collect_garbage(store).deleted["tmp"] == left
    assert markers(store) == [] and audit(store) == []


SKEWED = """
import runpy, sys, time
skew = float(sys.argv[1])
real, real_ns = time.time, time.time_ns
time.time = lambda: real() + skew
time.time_ns = lambda: real_ns() + int(skew * 1e9)
sys.argv = ["neuronbuild", *sys.argv[2:]]
runpy.run_module("neuronbuild", run_name="__main__")
"""


def skewed(seconds: float, *args: str) -> subprocess.CompletedProcess[str]:
    """``neuronbuild ARGS`` on a host whose clock is off by ``seconds``."""
    return subprocess.run(
        [sys.executable, "-c", SKEWED, str(seconds), *args], capture_output=True, text=True
    )


@pytest.fixture(params=["folder", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    root = request.getfixturevalue("s3_root") if request.param == "s3" else None
    return fresh_url(request.param, tmp_path, root)


@pytest.mark.slow
def test_gc_on_a_host_two_days_ahead_keeps_a_shard_published_seconds_before(
    store_url: str, tmp_path: Path
) -> None:
    """Regression: the grace period was read off gc's host clock, so a host two days ahead swept
    an unsealed shard (unit record and blob) published a moment before. Now ages are the
    store's: a probe object's modification time (file system, S3 server)."""
    store = Store(store_url)
    record = store.put_unit(stored_unit(store, tmp_path))
    ran = skewed(2 * DAY, "gc", "--json", "--cache", store_url)
    assert ran.returncode == 0, ran.stderr
    assert not any(json.loads(ran.stdout)["deleted"].values())
    assert store.cached_units([record.key]) == {record.key: record}


@pytest.mark.slow
def test_a_move_by_a_host_a_minute_slow_stays_in_history_and_keeps_its_manifest(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: history was ordered by the writer's clock in each entry's name, so the entry
    of a move made on a host a minute slow sorted before the move it followed; the chain walk
    lost the older move (``ls --history``) and gc swept its manifest. Now the chain is walked by
    ``previous`` links, ties broken by the store's modification times."""
    store = Store(store_url)
    first = publish_build(store, cpu_recipe(cpu_isa="host", name="app"), tmp_path, "1")
    second = publish_build(store, cpu_recipe(cpu_isa="host", name="b"), tmp_path, "2")
    time.sleep(1.1)  # S3's modification times are whole seconds
    real, real_ns = time.time, time.time_ns
    monkeypatch.setattr(time, "time", lambda: real() - 60)
    monkeypatch.setattr(time, "time_ns", lambda: real_ns() - 60 * 10**9)
    store.move_ref("app", "latest", second, first)
    monkeypatch.undo()
    shown = json.loads(nb("ls", "--history", "--json", "--cache", store_url).stdout)
    moves = [(m["previous"], m["manifest"]) for m in shown["history"]["app/latest"]]
    assert moves == [(None, first), (first, second)]
    collect_garbage(store, now=time.time() + 10 * DAY)
    assert store.has_manifest(first) and audit(store) == []


@pytest.mark.parametrize("command", ["tag", "push", "pull"])
def test_every_command_that_moves_a_ref_refuses_a_manifest_a_killed_gc_condemned(
    tmp_path: Path, command: str
) -> None:
    """``tag``, ``push`` (into the store) and ``pull`` (into the local tier) move refs through
    the one protocol: onto a manifest a gc killed after condemning it, each fails with one line,
    exit 3, and moves nothing; once that gc's rerun has swept it, the same command succeeds."""
    store, _, orphan = orphaned_store(tmp_path)
    source = tmp_path / "source"
    shutil.copytree(store.root, source)
    Store(str(source)).set_ref("old", "latest", orphan)
    script = (
        "import os, signal, sys; from neuronbuild.store.cas import Store; "
        "from neuronbuild.store.gc import collect_garbage; "
        "collect_garbage(Store(sys.argv[1]), at_step=lambda s: s == 'condemned' and "
        "os.kill(os.getpid(), signal.SIGKILL))"
    )
    subprocess.run([sys.executable, "-c", script, store.root], check=False)
    args = {
        "tag": ["tag", orphan, "old/latest", "--cache", store.root],
        "push": ["push", "old/latest", "--from", str(source), "--cache", store.root],
        "pull": ["pull", "old/latest", "--cache", str(source), "--local-cache", store.root],
    }[command]
    refused = nb(*args)
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.strip().splitlines()[-1].endswith(f"gc is sweeping {orphan}; retry")
    assert store.get_ref("old", "latest") is None and audit(store) == []
    collect_garbage(store)
    assert not store.has_manifest(orphan) and markers(store) == []
    if command != "tag":  # the manifest is gone: only a copy brings it back
        landed = nb(*args)
        assert landed.returncode == 0, landed.stderr
        assert store.get_ref("old", "latest") == orphan and audit(store) == []


def test_a_rollback_racing_gc_lands_on_a_manifest_gc_kept(tmp_path: Path) -> None:
    """A move back to a manifest further down its ref's chain (a rollback, or a rebuild that
    seals an old digest again) whose intent lands after gc's mark: gc spares that manifest even
    though the walk puts the intent mid-chain, so the swap that follows points at a build that
    exists (review finding: only the chain's head was spared)."""
    store = Store(str(tmp_path / "store"), create=True)
    old = publish_build(store, cpu_recipe(cpu_isa="host", seed=1), tmp_path, "a")
    new = publish_build(store, cpu_recipe(cpu_isa="host", seed=2), tmp_path, "b")
    assert old != new and [m.manifest for m in store.ref_history("tiny", "latest")] == [old, new]
    age(Path(store.root), 2 * DAY)

    def a_rollback_half_way(step: str) -> None:
        if step == "marked":  # the mover's intent, written after its condemned/present checks
            entry = store.layout.history_entry("tiny", "latest", time.time_ns(), old)
            store.backend.create(entry, RefMove(time.time(), old, new).to_bytes())

    report = collect_garbage(store, keep_last=1, at_step=a_rollback_half_way)
    assert report.restored == [old]
    store.backend.put(store.layout.ref("tiny", "latest"), (old + "\n").encode())  # its swap
    assert store.has_manifest(old) and audit(store) == []
