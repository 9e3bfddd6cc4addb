"""Unit leases: which builder is compiling a unit right now, so that a second ``compile`` of the
same recipe against the same store takes other units, or waits, instead of compiling it too.

A lease is one small object per unit key (:meth:`~neuronbuild.store.layout.Layout.lease`)
naming its owner (host, process id and a random token) and when it was taken. It is taken by a
create-if-absent, renewed by a compare-and-swap that rewrites it (a fresh modification time)
every :data:`RENEW_SECONDS` from a thread of the owner, and deleted when the unit ends, by a
conditional delete (:meth:`~neuronbuild.transports.backends.Backend.delete_if`: only the version its
owner read, never one another builder took over since). A lease whose modification time is older
than :data:`LEASE_SECONDS` by the store's clock is expired (its builder died: the renew thread
dies with it) and is taken over by compare-and-swap, never by delete-then-create, so two builders
cannot both take it over. Where the store keeps no modification times, the ``taken`` time the
lease holds (its owner's clock, rewritten by each renewal) stands in.

A lease is advice only: the unit record stays the truth. A unit whose record is in the store is
never compiled again, whoever holds its lease, and a lost lease (renewals failing for longer
than the expiry) costs at most one unit compiled twice, never a wrong build.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from neuronbuild.errors import StoreDataInvalid, StoreError, Unsupported
from neuronbuild.store.cas import Store, store_now
from neuronbuild.store.layout import MAX_SMALL_BYTES
from neuronbuild.transports.backends import SwapConflict

LEASE_SECONDS = 300.0
"""A lease not renewed for this long (store clock) is expired: its builder is gone."""
RENEW_SECONDS = 60.0
"""How often a live builder renews each lease it holds."""
POLL_SECONDS = 5.0
"""How often a builder waiting for another's units looks for their records and leases."""


@dataclass(frozen=True)
class LeaseTimes:
    """A lease's expiry, renewal and poll periods, in seconds (tests shrink them)."""

    lease: float = LEASE_SECONDS
    renew: float = RENEW_SECONDS
    poll: float = POLL_SECONDS


@dataclass(frozen=True)
class Owner:
    """The builder holding a lease: its host, process id and a token unique to its run."""

    host: str
    pid: int
    token: str

    def __str__(self) -> str:
        return f"{self.host} pid {self.pid}"

    @staticmethod
    def parse(data: bytes) -> Owner:
        """The owner a lease object names; an unreadable one is ``unknown`` (a lease is advice:
        its age, not its text, decides whether it holds)."""
        try:
            owner = json.loads(data)["owner"]
            return Owner(str(owner["host"]), int(owner["pid"]), str(owner["token"]))
        except (ValueError, TypeError, KeyError):
            return Owner("unknown", 0, "")


class Lease:
    """A lease this process holds on one unit, renewed by a daemon thread until
    :meth:`release`; ``took_over``: the owner of the expired lease it replaced (None: it was
    free)."""

    def __init__(self, leases: Leases, key: str, took_over: Owner | None) -> None:
        self.leases, self.key, self.took_over = leases, key, took_over
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name="neuronbuild-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        while not self._stop.wait(self.leases.times.renew):
            with contextlib.suppress(StoreError, StoreDataInvalid, SwapConflict):
                if not self.leases.renew(self.key):
                    return  # another builder took it over: the unit record decides

    def release(self) -> None:
        """Stop renewing and delete the lease, unless another builder holds it by now."""
        self._stop.set()
        self._thread.join()
        self.leases.release(self.key)


class Leases:
    """The leases of one store, taken by one builder (``owner``, made up for this run)."""

    def __init__(self, store: Store, times: LeaseTimes | None = None) -> None:
        self.store, self.backend = store, store.backend
        self.times = times or LeaseTimes()
        self.owner = Owner(socket.gethostname(), os.getpid(), uuid.uuid4().hex)
        self._offset: float | None = None  # the store's clock minus this host's

    def _bytes(self) -> bytes:
        owner = {"host": self.owner.host, "pid": self.owner.pid, "token": self.owner.token}
        return json.dumps({"owner": owner, "taken": time.time()}, sort_keys=True).encode()

    def _now(self) -> float:
        """The store's clock now (seconds since the epoch), from one probe per run."""
        if self._offset is None:
            self._offset = store_now(self.store) - time.time()
        return time.time() + self._offset

    def _read(self, key: str) -> tuple[Owner, Any, bool] | None:
        """The lease's owner, version token and whether it expired; None when there is none."""
        path = self.store.layout.lease(key)
        data, token = self.backend.read_versioned(path, MAX_SMALL_BYTES)
        if data is None:
            return None
        when = renewed(self.store, path, data)
        expired = when is not None and when < self._now() - self.times.lease
        return Owner.parse(data), token, expired

    def take(self, key: str) -> Lease | None:
        """Take the lease of unit ``key``: a free one, or an expired one by compare-and-swap.
        None when another live builder holds it (or won the race for it).

        Raises:
            StoreError: the store failed.
        """
        path = self.store.layout.lease(key)
        if self.backend.create(path, self._bytes()):
            return Lease(self, key, None)
        found = self._read(key)
        if found is None:  # released in between: one more try
            return Lease(self, key, None) if self.backend.create(path, self._bytes()) else None
        owner, token, expired = found
        if not expired:
            return None
        try:
            self.backend.swap(path, self._bytes(), token)
        except SwapConflict:
            return None
        return Lease(self, key, owner)

    def holder(self, key: str) -> Owner | None:
        """The live builder holding unit ``key``'s lease; None when it is free or expired."""
        found = self._read(key)
        return found[0] if found is not None and not found[2] else None

    def _ours(self, key: str) -> Any:
        """The version token of ``key``'s lease if this builder holds it, else None."""
        found = self._read(key)
        return found[1] if found is not None and found[0] == self.owner else None

    def renew(self, key: str) -> bool:
        """Rewrite this builder's lease of ``key`` (a fresh modification time); False when it is
        not this builder's any more.

        Raises:
            SwapConflict: it changed while being renewed. StoreError: the store failed.
        """
        token = self._ours(key)
        if token is None:
            return False
        self.backend.swap(self.store.layout.lease(key), self._bytes(), token)
        return True

    def release(self, key: str) -> None:
        """Delete this builder's lease of ``key``, the version it read only: one another builder
        took over in between stays (a store failure, or a registry that refuses deletes, leaves
        it to expire)."""
        with contextlib.suppress(StoreError, StoreDataInvalid, Unsupported):
            token = self._ours(key)
            if token is not None:
                self.backend.delete_if(self.store.layout.lease(key), token)


def renewed(store: Store, path: str, data: bytes) -> float | None:
    """When the lease at ``path`` holding ``data`` was last taken or renewed (seconds since the
    epoch): its modification time (the store's clock, asked of the store), else the ``taken``
    time it holds (its owner's clock; None when it holds none)."""
    modified = store.backend.modified(path, fresh=True)
    if modified is not None:
        return modified
    try:
        return float(json.loads(data)["taken"])
    except (ValueError, TypeError, KeyError):
        return None


def expired_leases(
    store: Store, now: float, lease_seconds: float = LEASE_SECONDS
) -> dict[str, Any]:
    """The lease objects not renewed for ``lease_seconds`` at ``now`` (store clock, seconds
    since the epoch), by path, each with the version token of the expired version (for
    :meth:`~neuronbuild.transports.backends.Backend.delete_if`): builders that died holding them
    (``gc`` deletes them). Each one listed as expired is read again, then its time asked again,
    so one taken over since the listing is left out.

    Raises:
        StoreError: the store failed.
    """
    times = store.backend.list_modified(store.layout.folder("leases"))
    found: dict[str, Any] = {}
    for path, listed in sorted(times.items()):
        if listed is not None and listed >= now - lease_seconds:
            continue  # live by the listing: no read needed
        try:
            data, token = store.backend.read_versioned(path, MAX_SMALL_BYTES)
        except StoreDataInvalid:
            continue  # not a lease this code wrote; gc leaves what it cannot read
        # Read first, then timed: a version renewed after the read is seen fresh here.
        when = renewed(store, path, data) if data is not None else None
        if when is not None and when < now - lease_seconds:
            found[path] = token
    return found
