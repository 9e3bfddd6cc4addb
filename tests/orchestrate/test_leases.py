"""Two builders of one recipe against one store share its units (issue 20, CI: "Two compiles of
one recipe at once"): a unit another live builder has leased is left while others run, then
waited for and adopted; an expired lease (a dead builder's) is taken over; ``gc`` sweeps expired
leases. The leases themselves are tested on a folder, on S3 (moto) and on an OCI registry."""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from neuronbuild.errors import StoreDataInvalid, StoreError
from neuronbuild.orchestrate.events import Silent
from neuronbuild.orchestrate.sharing import Sharing
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from neuronbuild.store.leases import Leases, LeaseTimes, Owner
from neuronbuild.transports.backends import FolderBackend
from neuronbuild.ui.progress import Progress
from tests.lib.registry import registry_root
from tests.lib.s3 import moto_s3
from tests.orchestrate.test_shards import builds, double_env, double_recipe, write_recipes

__all__ = ["registry_root"]  # the module's registry, for the leases on OCI

BUCKET = "neuronbuild-leases"
OTHER = {"owner": {"host": "other-host", "pid": 4242, "token": "t0"}, "taken": 0}
"""A lease as another builder writes it (``other-host pid 4242``)."""


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    with moto_s3(BUCKET) as env:
        yield env


@pytest.fixture(params=["folder", "s3", "oci"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "folder":
        return Store(str(tmp_path / "store"), create=True)
    if request.param == "oci":  # a registry's writes are checked after writing (store.oci)
        return Store(f"{request.getfixturevalue('registry_root')}/leases/{uuid.uuid4().hex[:10]}")
    request.getfixturevalue("s3_env")
    return Store(f"s3://{BUCKET}/{tmp_path.name}", create=True)


KEY = "sha256:" + "ab" * 32


# The leases, on a folder and on S3.


def test_a_lease_is_held_by_one_builder_until_released(store: Store) -> None:
    first, second = Leases(store), Leases(store)
    lease = first.take(KEY)
    assert lease is not None and lease.took_over is None
    assert second.take(KEY) is None
    assert second.holder(KEY) == first.owner
    lease.release()
    assert second.holder(KEY) is None
    taken = second.take(KEY)
    assert taken is not None and taken.took_over is None
    taken.release()


@pytest.mark.slow
def test_an_expired_lease_is_taken_over_by_one_builder_and_its_release_spares_the_new_one(
    store: Store,
) -> None:
    # S3 keeps whole seconds: a modification time reads up to 1 s early, and so does the store
    # clock probe. The racers' takes must lie within lease - 1 s of each other to see one
    # another's lease live, and the dead one must be older than lease + 1 s.
    times = LeaseTimes(lease=3.0, renew=60.0)
    dead = Leases(store, times)
    stale = dead.take(KEY)
    assert stale is not None
    time.sleep(4.5)
    racers = [Leases(store, times) for _ in range(3)]
    taken = [lease for lease in (r.take(KEY) for r in racers) if lease is not None]
    assert len(taken) == 1 and taken[0].took_over == dead.owner
    stale.release()  # the builder thought dead comes back: it must not free the new owner's
    assert racers[0].holder(KEY) in {r.owner for r in racers}
    taken[0].release()


@pytest.mark.slow
def test_a_renewed_lease_outlives_its_expiry(store: Store) -> None:
    times = LeaseTimes(lease=2.0, renew=0.3)
    lease = Leases(store, times).take(KEY)
    assert lease is not None
    time.sleep(3.5)
    assert Leases(store, times).take(KEY) is None
    lease.release()


def ahead(store: Store) -> Leases:
    """A builder whose clock runs 1000 s ahead: every lease it reads is expired to it."""
    racer = Leases(store)
    racer._offset = 1000.0
    return racer


def test_a_release_spares_a_lease_taken_over_after_its_owner_read_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = Leases(store)
    stale = old.take(KEY)
    assert stale is not None
    racer, taken = ahead(store), []
    ours = old._ours

    def read_then_taken_over(key: str) -> object:
        token = ours(key)
        taken.append(racer.take(key))  # between the owner's read and its delete
        return token

    monkeypatch.setattr(old, "_ours", read_then_taken_over)
    stale.release()
    assert taken[0] is not None and taken[0].took_over == old.owner
    assert Leases(store).holder(KEY) == racer.owner
    taken[0].release()
    assert Leases(store).holder(KEY) is None


@pytest.mark.slow
def test_a_lease_expires_by_its_taken_time_where_the_store_keeps_no_times(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store.backend, "modified", lambda path, fresh=False: None)
    assert store.backend.create(store.layout.lease(KEY), json.dumps(OTHER).encode())
    times = LeaseTimes(lease=1.5, renew=0.3)
    lease = Leases(store, times).take(KEY)  # taken at 0: long dead
    assert lease is not None and lease.took_over == Owner("other-host", 4242, "t0")
    time.sleep(2.0)  # renewals rewrite the taken time
    assert Leases(store, times).take(KEY) is None
    lease.release()


def test_a_folder_swap_whose_lock_fails_is_a_store_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    leases = Leases(store)
    lease = leases.take(KEY)
    assert lease is not None
    path = store.layout.lease(KEY)
    monkeypatch.setattr(FolderBackend, "LOCK_SECONDS", 0.1)
    with FileLock(store.layout.ref_lock(path)), pytest.raises(StoreError, match="held for over"):
        leases.renew(KEY)  # another process holds its lock
    shutil.rmtree(tmp_path / "store" / "locks")
    (tmp_path / "store" / "locks").write_text("")  # the lock's folder cannot be made
    with pytest.raises(StoreError, match="cannot lock"):
        leases.renew(KEY)
    with pytest.raises(StoreError, match="cannot lock"):
        store.backend.delete_if(path, b"")


def test_a_claim_whose_record_check_fails_releases_its_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (recipe,) = write_recipes(tmp_path, [double_recipe("flaky")])
    unit = build_plan(load_recipe(recipe)).units[0]
    store = Store(str(tmp_path / "store"), create=True)
    outages: list[StoreError | StoreDataInvalid] = []
    sharing = Sharing(store, Leases(store), Silent(), outages)

    def fails(*args: object, **kwargs: object) -> object:
        raise StoreError("the store went away")

    monkeypatch.setattr(store, "cached_units", fails)
    with pytest.raises(StoreError):
        sharing.claim(unit)
    assert len(outages) == 1
    assert not Path(store.layout.lease(unit.key.digest)).exists()


def test_an_adopted_unit_counts_toward_the_progress_total() -> None:
    stream = io.StringIO()
    progress = Progress(2, stream=stream)
    progress.adopted(KEY, "dynamic")
    progress.close()
    assert "adopted  dynamic (" in stream.getvalue()
    assert "another builder compiled it; 1/2 finished, 0 running, 0 failed" in stream.getvalue()
    assert progress.done == 1


def test_gc_spares_a_lease_taken_over_after_its_listing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    dead = Path(store.layout.lease(KEY))
    dead.parent.mkdir(parents=True, exist_ok=True)
    dead.write_text(json.dumps(OTHER))
    os.utime(dead, (time.time() - 600, time.time() - 600))
    racer, taken = ahead(store), []
    listing = store.backend.list_modified

    def listed_then_taken_over(prefix: str) -> dict[str, float | None]:
        found = listing(prefix)
        if prefix == store.layout.folder("leases"):
            taken.append(racer.take(KEY))  # between gc's listing and its delete
        return found

    monkeypatch.setattr(store.backend, "list_modified", listed_then_taken_over)
    report = collect_garbage(store)
    assert taken[0] is not None and "leases" not in report.deleted
    assert Leases(store).holder(KEY) == racer.owner
    taken[0].release()


def test_gc_deletes_expired_leases_and_keeps_live_ones(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    live = Leases(store).take(KEY)
    assert live is not None
    dead = Path(store.layout.lease("sha256:" + "cd" * 32))
    dead.write_text(json.dumps(OTHER))
    os.utime(dead, (time.time() - 600, time.time() - 600))
    report = collect_garbage(store)
    assert report.deleted.get("leases") == [str(dead)]
    assert not dead.exists() and Path(store.layout.lease(KEY)).exists()
    live.release()


# Two builders, as real processes with the CPU test double of vLLM.


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def no_builder_left() -> Iterator[None]:
    """A test that fails while a builder waits (at the double's gate, or for a lease) ends it."""
    yield
    while STARTED:
        proc = STARTED.pop()
        if proc.poll() is None:
            proc.terminate()  # neuronbuild ends its engine's process group on SIGTERM
            proc.communicate(timeout=60)


def start(*args: str, env: dict[str, str], err: Path) -> subprocess.Popen[str]:
    with open(err, "w") as stream:
        proc = subprocess.Popen(
            [sys.executable, "-m", "neuronbuild", *args],
            stdout=subprocess.PIPE,
            stderr=stream,
            text=True,
            env=env,
        )
    STARTED.append(proc)
    return proc


def wait_until(what: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def statuses(out: str) -> dict[str, int]:
    counts: dict[str, int] = json.loads(out)["recipes"][0]["n_units_by_status"]
    return {status: n for status, n in counts.items() if n}


def lease_of(recipe: str, cache: Path) -> Path:
    """Where the layout puts the lease of the recipe's (one) unit: ``leases/<key hex>.json``."""
    key = build_plan(load_recipe(recipe)).units[0].key.digest
    return cache / "leases" / f"{key.removeprefix('sha256:')}.json"


@pytest.mark.slow
def test_a_second_compile_of_one_recipe_waits_for_the_first_and_adopts_its_unit(
    tmp_path: Path,
) -> None:
    (recipe,) = write_recipes(tmp_path, [double_recipe("shared")])
    gate = tmp_path / "gate"
    env = double_env(tmp_path, CPU_DOUBLE_GATE=str(gate))
    cache = str(tmp_path / "store")
    lease = lease_of(recipe, tmp_path / "store")
    args = ("compile", recipe, "--cache", cache, "--json")
    first = start(*args, env=env, err=tmp_path / "first.err")
    wait_until(lease.exists)  # the first builder holds the unit, its build held at the gate
    second = start(*args, env=env, err=tmp_path / "second.err")
    waiting = f"waiting for 1 unit another builder is compiling ({socket.gethostname()} pid"
    wait_until(lambda: waiting in (tmp_path / "second.err").read_text())
    gate.touch()
    out1, _ = first.communicate(timeout=120)
    out2, _ = second.communicate(timeout=120)
    err2 = (tmp_path / "second.err").read_text()
    assert (first.returncode, second.returncode) == (0, 0), err2
    assert f"pid {first.pid})" in err2 and "adopted  dynamic (" in err2
    assert "another builder compiled it; 1/1 finished" in err2  # the progress reaches its total
    assert builds(tmp_path) == {4: 1}  # built once in all
    assert (statuses(out1), statuses(out2)) == ({"compiled": 1}, {"adopted": 1})
    assert json.loads(out1)["recipes"][0]["manifest"] == json.loads(out2)["recipes"][0]["manifest"]
    assert not lease.exists()


def test_an_expired_lease_of_a_dead_builder_is_taken_over(tmp_path: Path) -> None:
    (recipe,) = write_recipes(tmp_path, [double_recipe("orphan")])
    cache = str(tmp_path / "store")
    lease = lease_of(recipe, tmp_path / "store")
    lease.parent.mkdir(parents=True)
    lease.write_text(json.dumps(OTHER))
    os.utime(lease, (time.time() - 600, time.time() - 600))  # not renewed for 10 minutes
    done = subprocess.run(
        [sys.executable, "-m", "neuronbuild", "compile", recipe, "--cache", cache],
        capture_output=True,
        text=True,
        env=double_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert "taking over dynamic: lease of other-host pid 4242 expired" in done.stderr
    assert builds(tmp_path) == {4: 1} and not lease.exists()


@pytest.mark.slow
def test_a_unit_another_live_builder_holds_is_left_while_the_others_compile(
    tmp_path: Path,
) -> None:
    held, free = write_recipes(
        tmp_path, [double_recipe("held", max_num_seqs=1), double_recipe("free", max_num_seqs=2)]
    )
    cache = str(tmp_path / "store")
    lease = lease_of(held, tmp_path / "store")
    lease.parent.mkdir(parents=True)
    lease.write_text(json.dumps(OTHER))  # fresh: a live builder compiles it
    err = tmp_path / "err"
    proc = start(
        "compile", held, free, "--cache", cache, "--json", env=double_env(tmp_path), err=err
    )
    waiting = "waiting for 1 unit another builder is compiling (other-host pid 4242)"
    wait_until(lambda: waiting in err.read_text())
    assert builds(tmp_path) == {2: 1}  # the free unit first, though it comes second
    os.utime(lease, (time.time() - 600, time.time() - 600))  # that builder dies
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.read_text()
    assert "taking over dynamic: lease of other-host pid 4242 expired" in err.read_text()
    lines = (tmp_path / "builds.jsonl").read_text().splitlines()
    assert [json.loads(line)["engine_args"]["max_num_seqs"] for line in lines] == [2, 1]
    assert [r["n_units_by_status"]["compiled"] for r in json.loads(out)["recipes"]] == [1, 1]


def test_a_dry_run_takes_no_lease(tmp_path: Path) -> None:
    (recipe,) = write_recipes(tmp_path, [double_recipe("dry")])
    cache = str(tmp_path / "store")
    Store(cache, create=True)
    done = subprocess.run(
        [sys.executable, "-m", "neuronbuild", "compile", recipe, "--cache", cache, "--dry-run"],
        capture_output=True,
        text=True,
        env=double_env(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "store" / "leases").exists()


class _Ref:
    def __init__(self, value: object) -> None:
        self.value = value


class _InlineRay:
    """Just enough of Ray for :class:`RayExecutor`'s loop: each task runs when submitted."""

    class exceptions:  # as Ray spells it
        RayError = RuntimeError

    def remote(self, **options: object) -> Callable[[Callable[..., object]], object]:
        def wrap(fn: Callable[..., object]) -> object:
            class Task:
                def options(self, **given: object) -> Task:
                    return self

                def remote(self, *args: object) -> object:
                    return _Ref(fn(*args))

            return Task()

        return wrap

    def put(self, value: object) -> object:
        return value

    def get(self, ref: _Ref) -> object:
        return ref.value

    def wait(self, refs: list[object], **options: object) -> tuple[list[object], list[object]]:
        return refs[:1], refs[1:]

    def nodes(self) -> list[dict[str, object]]:
        return [{"Alive": True, "Resources": {"CPU": 4.0}}]

    def is_initialized(self) -> bool:
        return True


class _CountedRay(_InlineRay):
    """:class:`_InlineRay` that counts the sessions started and stopped."""

    def __init__(self) -> None:
        self.inits = self.shutdowns = 0

    def init(self, **options: object) -> None:
        self.inits += 1

    def shutdown(self) -> None:
        self.shutdowns += 1

    def is_initialized(self) -> bool:
        return self.inits > self.shutdowns


def test_the_ray_executor_claims_each_unit_before_submitting_it(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from neuronbuild.orchestrate.ray_executor import RayExecutor

    held, free = write_recipes(
        tmp_path, [double_recipe("held", max_num_seqs=1), double_recipe("free", max_num_seqs=2)]
    )
    units = [build_plan(load_recipe(r)).units[0] for r in (held, free)]
    store = Store(str(tmp_path / "store"), create=True)
    other, ours = Leases(store), Leases(store)
    taken = other.take(units[0].key.digest)
    ran: list[str] = []
    executor = RayExecutor(None)
    executor.ray = _InlineRay()
    engine = build_plan(load_recipe(held)).engine
    estimates = {u.key.digest: engine.estimate(len(u.graphs)) for u in units}
    results = executor.run(
        units,
        lambda unit, groups: ran.append(unit.key.digest),
        1,
        Silent(),
        estimates,
        claim=lambda unit: ours.take(unit.key.digest),
    )
    assert [r.held for r in results] == [True, False] and ran == [units[1].key.digest]
    assert ours.holder(units[1].key.digest) is None  # released once its task ended
    assert taken is not None
    taken.release()


def test_the_ray_executor_connects_once_for_every_round_of_a_session(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from neuronbuild.orchestrate.ray_executor import RayExecutor

    (recipe,) = write_recipes(tmp_path, [double_recipe("rounds")])
    plan = build_plan(load_recipe(recipe))
    estimates = {u.key.digest: plan.engine.estimate(len(u.graphs)) for u in plan.units}
    executor = RayExecutor(None)
    executor.ray = counted = _CountedRay()
    with executor.session():
        for _ in range(3):  # a compile's rounds of claiming and waiting
            executor.run(plan.units, lambda unit, groups: None, 1, Silent(), estimates)
        assert (counted.inits, counted.shutdowns) == (1, 0)
    assert (counted.inits, counted.shutdowns) == (1, 1)
