"""Pins (issue 46 item 18) of the claims taking a lease carries, each with a fast in-process test
on a folder store that fails when its check is removed or inverted: a takeover that loses the
compare-and-swap race takes nothing; a lease that was released in between is taken only by a
create that wins; a lease with no time at all is live, not expired; expiry is judged by the
store's clock, not the builder's; an expired lease has no holder; a renewal (and its thread)
stops once another builder took the lease over, leaving the new owner's lease as it is."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.store import leases as leases_module
from neuronbuild.store.cas import Store
from neuronbuild.store.leases import Leases, LeaseTimes, Owner
from tests.lib.build_processes import wait_for
from tests.orchestrate.test_leases import ahead

KEY = "sha256:" + "ab" * 32
OTHER = {"owner": {"host": "other-host", "pid": 4242, "token": "t0"}, "taken": 0}
"""A lease as another builder writes it (``other-host pid 4242``), taken at 0."""
OTHER_OWNER = Owner("other-host", 4242, "t0")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(str(tmp_path / "store"), create=True)


def write_lease(store: Store, data: dict[str, Any], age: float) -> Path:
    """Another builder's lease of :data:`KEY` holding ``data``, last renewed ``age`` s ago."""
    path = Path(store.layout.lease(KEY))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    os.utime(path, (time.time() - age, time.time() - age))
    return path


def test_a_takeover_that_loses_the_swap_race_takes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_lease(store, OTHER, age=600)
    racer, won = Leases(store), []
    swap = store.backend.swap

    def another_takes_it_first(path: str, data: bytes, token: Any) -> None:
        monkeypatch.setattr(store.backend, "swap", swap)
        won.append(racer.take(KEY))  # between this builder's read and its swap
        swap(path, data, token)

    monkeypatch.setattr(store.backend, "swap", another_takes_it_first)
    assert Leases(store).take(KEY) is None
    assert won[0] is not None and won[0].took_over == OTHER_OWNER
    assert Leases(store).holder(KEY) == racer.owner
    won[0].release()


def test_a_lease_released_in_between_is_taken_only_by_a_create_that_wins(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The first create finds a lease, the read finds none (released), the second create loses
    # to a third builder: nothing is taken.
    leases = Leases(store)
    monkeypatch.setattr(store.backend, "create", lambda path, data: False)
    monkeypatch.setattr(leases, "_read", lambda key: None)
    assert leases.take(KEY) is None


def test_a_lease_with_no_time_at_all_is_live(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store.backend, "modified", lambda path, fresh=False: None)
    write_lease(store, {"owner": OTHER["owner"]}, age=600)  # no "taken", no store time
    assert Leases(store).holder(KEY) == OTHER_OWNER
    assert Leases(store).take(KEY) is None


def test_expiry_is_judged_by_the_stores_clock_not_the_builders(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_lease(store, OTHER, age=0)  # fresh by this host's clock
    monkeypatch.setattr(leases_module, "store_now", lambda store: time.time() + 1000)
    taken = Leases(store).take(KEY)  # the store's clock says it was not renewed for 1000 s
    assert taken is not None and taken.took_over == OTHER_OWNER
    taken.release()


def test_an_expired_lease_has_no_holder(store: Store) -> None:
    write_lease(store, OTHER, age=600)
    assert Leases(store).holder(KEY) is None


def test_a_renewal_after_a_takeover_fails_and_leaves_the_new_owners_lease(store: Store) -> None:
    old = Leases(store)
    lease = old.take(KEY)
    assert lease is not None
    racer = ahead(store)
    taken = racer.take(KEY)
    assert taken is not None and taken.took_over == old.owner
    assert old.renew(KEY) is False
    assert Leases(store).holder(KEY) == racer.owner
    lease.release()
    assert Leases(store).holder(KEY) == racer.owner
    taken.release()


def test_the_renewing_thread_stops_once_another_builder_took_the_lease_over(
    store: Store,
) -> None:
    lease = Leases(store, LeaseTimes(renew=0.05)).take(KEY)
    assert lease is not None
    taken = ahead(store).take(KEY)
    assert taken is not None
    assert wait_for(lambda: not lease._thread.is_alive(), 1)
    lease.release()
    taken.release()
