"""Commands racing each other, with real processes: gc against ref moves, a ref move and its
history entry under faults and kills, concurrent movers of one ref."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest

from neuronbuild.errors import StoreError
from neuronbuild.orchestrate.verify import verify_manifest
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from tests.conftest import cpu_recipe, publish_build
from tests.conftest import neuronbuild as nb

LATER = time.time() + 10 * 86400


def two_builds(tmp_path: Path) -> tuple[Store, str, str]:
    """A store with a live build (tiny/latest) and an old one no ref reaches any more."""
    store = Store(str(tmp_path / "store"), create=True)
    orphan = publish_build(store, cpu_recipe(cpu_isa="host", name="old"), tmp_path, "a")
    live = publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "b")
    store.backend.delete(store.layout.ref("old", "latest"))
    return store, live, orphan


def test_a_ref_moved_while_gc_is_held_between_mark_and_sweep_never_dangles(
    tmp_path: Path,
) -> None:
    store, live, orphan = two_builds(tmp_path)
    moved: list[subprocess.CompletedProcess[str]] = []

    def tag_in_another_process(step: str) -> None:
        if step == "marked":
            moved.append(nb("tag", orphan, "old/prod", "--cache", store.url, process=True))

    report = collect_garbage(store, now=LATER, at_step=tag_in_another_process)
    assert moved[0].returncode == 0, moved[0].stderr
    assert report.restored == [orphan]
    assert store.get_ref("old", "prod") == orphan
    assert not verify_manifest(store, orphan, deep=True).problems
    assert not verify_manifest(store, live, deep=True).problems


def test_without_a_racing_move_gc_sweeps_the_unreferenced_build(tmp_path: Path) -> None:
    store, live, orphan = two_builds(tmp_path)
    report = collect_garbage(store, now=LATER, at_step=lambda _: None)
    assert report.restored == []
    assert not store.has_manifest(orphan)
    assert not verify_manifest(store, live, deep=True).problems


def test_a_failed_history_write_leaves_the_ref_where_it_was_and_a_rerun_records_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, live, _ = two_builds(tmp_path)
    real_create = store.backend.create

    def failing(path: str, data: bytes) -> bool:
        if "/history/" in path:
            raise StoreError("injected: cannot write history")
        return real_create(path, data)

    monkeypatch.setattr(store.backend, "create", failing)
    with pytest.raises(StoreError):
        store.move_ref("tiny", "prod", live, None)
    assert store.get_ref("tiny", "prod") is None  # no move without its history entry
    monkeypatch.setattr(store.backend, "create", real_create)
    store.move_ref("tiny", "prod", live, None)
    assert [(m.previous, m.manifest) for m in store.ref_history("tiny", "prod")] == [(None, live)]


KILLED_TAG = """
import os, signal, sys
from neuronbuild.store.cas import Store
from neuronbuild.transports.backends import FolderBackend
real = FolderBackend.swap
def swap(self, path, data, token):
    if sys.argv[2] == "after":
        real(self, path, data, token)
    os.kill(os.getpid(), signal.SIGKILL)
FolderBackend.swap = swap
store = Store(sys.argv[1])
store.move_ref("tiny", "latest", sys.argv[3], store.get_ref("tiny", "latest"))
"""


@pytest.mark.parametrize("moment", ["before", "after"])
def test_a_tag_killed_around_the_ref_swap_loses_no_history_and_invents_none(
    tmp_path: Path, moment: str
) -> None:
    store, live, orphan = two_builds(tmp_path)
    before = store.ref_history("tiny", "latest")
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_TAG, store.url, moment, orphan], capture_output=True
    )
    assert killed.returncode == -9
    history = [(m.previous, m.manifest) for m in store.ref_history("tiny", "latest")]
    old = [(m.previous, m.manifest) for m in before]
    if moment == "after":
        assert store.get_ref("tiny", "latest") == orphan
        assert history == [*old, (live, orphan)]
    else:
        assert store.get_ref("tiny", "latest") == live
        assert history == old
        _, off_chain = store.ref_chain("tiny", "latest")
        assert len(off_chain) == 1  # the dead writer's entry: skipped, swept by gc when old
        report = collect_garbage(store, now=LATER)
        assert report.deleted["history"] == off_chain


@pytest.mark.slow
def test_concurrent_tags_of_one_ref_record_exactly_the_moves_that_happened(
    tmp_path: Path,
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    builds = [
        publish_build(store, cpu_recipe(cpu_isa="host", seed=i), tmp_path, str(i)) for i in range(6)
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "neuronbuild", "tag", b, "tiny/prod", "--cache", store.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for b in builds
    ]
    codes = [p.wait(timeout=60) for p in procs]
    assert set(codes) <= {0, 3}, codes  # a lost compare-and-swap is a store conflict
    chain, off_chain = store.ref_chain("tiny", "prod")
    assert len(chain) == codes.count(0) and not off_chain
    assert chain[-1][1].manifest == store.get_ref("tiny", "prod")
    for (_, earlier), (_, later) in itertools.pairwise(chain):
        assert later.previous == earlier.manifest
