"""Two builders of one recipe against one store share its units (issue 20, CI: "Two compiles of
one recipe at once"): a unit another live builder has leased is left while others run, then
waited for and adopted; an expired lease (a dead builder's) is taken over; ``gc`` sweeps expired
leases. The leases themselves are tested on a folder and on S3 (moto)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from neuronbuild.store.leases import Leases, LeaseTimes
from tests.build.test_shards import builds, double_env, double_recipe, write_recipes
from tests.lib.s3 import moto_s3

BUCKET = "neuronbuild-leases"
OTHER = {"owner": {"host": "other-host", "pid": 4242, "token": "t0"}, "taken": 0}
"""A lease as another builder writes it (``other-host pid 4242``)."""


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    with moto_s3(BUCKET) as env:
        yield env


@pytest.fixture(params=["folder", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "folder":
        return Store(str(tmp_path / "store"), create=True)
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


def test_an_expired_lease_is_taken_over_by_one_builder_and_its_release_spares_the_new_one(
    store: Store,
) -> None:
    times = LeaseTimes(lease=1.0, renew=60.0)
    dead = Leases(store, times)
    stale = dead.take(KEY)
    assert stale is not None
    time.sleep(2.5)  # S3 keeps whole seconds
    racers = [Leases(store, times) for _ in range(3)]
    taken = [lease for lease in (r.take(KEY) for r in racers) if lease is not None]
    assert len(taken) == 1 and taken[0].took_over == dead.owner
    stale.release()  # the builder thought dead comes back: it must not free the new owner's
    assert racers[0].holder(KEY) in {r.owner for r in racers}
    taken[0].release()


def test_a_renewed_lease_outlives_its_expiry(store: Store) -> None:
    times = LeaseTimes(lease=2.0, renew=0.3)
    lease = Leases(store, times).take(KEY)
    assert lease is not None
    time.sleep(3.5)
    assert Leases(store, times).take(KEY) is None
    lease.release()


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
    assert f"pid {first.pid})" in err2 and "adopted dynamic: another builder compiled it" in err2
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


def test_the_ray_executor_claims_each_unit_before_submitting_it(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from neuronbuild.build.events import Silent
    from neuronbuild.build.ray_executor import RayExecutor

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
