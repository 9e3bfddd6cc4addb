"""Two builders of one recipe against one store share its units instead of both compiling each.

Before a unit starts, its builder claims it (:meth:`Sharing.claim`, the executors'
:data:`~neuronbuild.orchestrate.scheduler.Claim`): it takes the unit's lease
(:mod:`neuronbuild.store.leases`), or, when another live builder holds it, leaves it and takes
the next unit. Once the units it could take have run, it waits for the held ones
(:meth:`Sharing.wait_for`): a unit whose record appears is adopted (the other builder's build is
this run's, nothing is compiled or fetched); a unit whose lease is released without a record (the
other builder's unit failed) or expires (that builder died) is claimed again and compiled here.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Sequence
from types import FrameType

from neuronbuild.errors import Interrupted, StoreDataInvalid, StoreError, catch_stop_signals
from neuronbuild.graph import CompileUnit
from neuronbuild.human import count
from neuronbuild.orchestrate.events import BuildObserver
from neuronbuild.store.cas import Store
from neuronbuild.store.leases import Lease, Leases
from neuronbuild.store.records import UnitRecord


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signum)


class Sharing:
    """One compile run's claims on the units of ``store`` (its ``leases``); notes go to
    ``observer``, store failures of a claim also to ``outages`` (raised once the run ends, as a
    unit's publish failures are)."""

    def __init__(
        self,
        store: Store,
        leases: Leases,
        observer: BuildObserver,
        outages: list[StoreError | StoreDataInvalid],
    ) -> None:
        self.store, self.leases, self.observer, self.outages = store, leases, observer, outages

    def claim(self, unit: CompileUnit) -> Lease | None:
        """The unit's lease, taken for this run; None when another live builder holds it or its
        record is in the store by now (:meth:`wait_for` adopts it).

        Raises:
            StoreError, StoreDataInvalid: the store failed (the unit fails; kept in ``outages``).
        """
        key = unit.key.digest
        lease = None
        try:
            lease = self.leases.take(key)
            if lease is not None and self.store.cached_units([key], repairing=True):
                lease.release()  # compiled by another builder since this run looked
                return None
        except (StoreError, StoreDataInvalid) as exc:
            if lease is not None:
                lease.release()  # the unit fails here: another builder may take it now
            self.outages.append(exc)
            raise
        if lease is not None and lease.took_over is not None:
            self.observer.note(f"taking over {unit.label()}: lease of {lease.took_over} expired")
        return lease

    def wait_for(
        self, units: Sequence[CompileUnit]
    ) -> tuple[dict[str, UnitRecord], list[CompileUnit]]:
        """Poll every :attr:`~neuronbuild.store.leases.LeaseTimes.poll` seconds until each of
        ``units`` (held by other builders) has a record or a lease that is free or expired.
        Returns the records that appeared (adopted, by key) and the units left, to claim again
        (those still held come back held: the run waits for them again).

        Raises:
            Interrupted: a stop signal arrived while waiting (this run holds no lease then).
            StoreError: the store failed.
        """
        adopted: dict[str, UnitRecord] = {}
        waiting = list(units)
        said = ""
        # Handlers can be set on the main thread only (a library caller may run a build on another).
        main = threading.current_thread() is threading.main_thread()
        previous = catch_stop_signals(_interrupt) if main else {}
        try:
            while waiting:
                found = self.store.cached_units((u.key.digest for u in waiting), repairing=True)
                for unit in (u for u in waiting if u.key.digest in found):
                    self.observer.adopted(unit.key.digest, unit.label())
                adopted.update(found)
                waiting = [u for u in waiting if u.key.digest not in found]
                holders = [self.leases.holder(u.key.digest) for u in waiting]
                if not waiting or None in holders:
                    return adopted, waiting
                owners = ", ".join(sorted({str(o) for o in holders if o is not None}))
                line = f"waiting for {count(len(waiting), 'unit')} another builder is compiling"
                if f"{line} ({owners})" != said:
                    said = f"{line} ({owners})"
                    self.observer.note(said)
                time.sleep(self.leases.times.poll)
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return adopted, waiting
