"""Concurrent ranged reads of one large object, handed back in order as one stream, so a blob is
hashed as its bytes arrive (:func:`~neuronbuild.digest.copy_verified` reads it) while the next
parts are still on the wire."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from neuronbuild.transports.retry import run_droppable

PART_BYTES = 16 << 20
"""Bytes per ranged GET (16 MiB, the part size of s3transfer's and obstore's own downloads)."""

IN_FLIGHT = 4
"""Ranged GETs in flight per object: with ``jobs`` objects read at once, at most ``jobs`` x 4
requests and ``jobs`` x 4 x 16 MiB of buffered bytes."""


class RangedReads:
    """A binary stream of the first ``size`` bytes of an object, read as ``part``-byte ranges,
    ``in_flight`` of them at once on threads; ``read_range(start, end)`` returns bytes
    ``[start, end)``, or a memoryview of them (fewer if the object is shorter: the caller's hash
    check sees it) and does its own retries. Its errors surface from :meth:`read`, in order.

    ``size`` is the object's own (from a HEAD), not its record's: an object longer than its
    record yields the byte past the record that ``copy_verified`` asks for, and is refused.
    Only the parts a caller reads, and ``in_flight`` beyond them, are ever asked for. Once
    closed (the reader is done, or gave up on an error), parts still retrying stop at their next
    wait (:func:`~.retry.pause`), so a failed read does not hold the process for their retries.
    """

    def __init__(
        self,
        read_range: Callable[[int, int], bytes | memoryview],
        size: int,
        *,
        part: int | None = None,
        in_flight: int = IN_FLIGHT,
    ) -> None:
        self._read_range, self._size = read_range, size
        self._part = part or PART_BYTES
        self._pool = ThreadPoolExecutor(max_workers=in_flight, thread_name_prefix="ranged-get")
        self._in_flight = in_flight
        self._parts: deque[Future[bytes | memoryview]] = deque()
        self._next = 0
        self._view = memoryview(b"")
        self._dropped = threading.Event()
        self._ask()

    def _ask(self) -> None:
        while len(self._parts) < self._in_flight and self._next < self._size:
            end = min(self._next + self._part, self._size)
            part = self._fetch(self._next, end)
            self._parts.append(self._pool.submit(run_droppable, self._dropped, part))
            self._next = end

    def _fetch(self, start: int, end: int) -> Callable[[], bytes | memoryview]:
        return lambda: self._read_range(start, end)

    def read(self, n: int = -1) -> bytes:
        """Up to ``n`` bytes (all that is left of the current part when ``n`` < 0); b"" at the
        end of the stream."""
        while not self._view:
            if not self._parts:
                return b""
            self._view = memoryview(self._parts.popleft().result())
            self._ask()
        n = len(self._view) if n < 0 else n
        out, self._view = self._view[:n], self._view[n:]
        return bytes(out)

    def close(self) -> None:
        """Drop the parts not yet read; requests already on the wire finish in the background,
        with no further retry."""
        self._dropped.set()
        for future in self._parts:
            future.cancel()
        self._parts.clear()
        self._view = memoryview(b"")
        self._pool.shutdown(wait=False, cancel_futures=True)

    def __enter__(self) -> RangedReads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
