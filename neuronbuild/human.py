"""Values as people read them: sizes, times, durations, counted nouns, absent values, tables.

Kernel: pure functions of their arguments (no terminal, no I/O), so that an error message at any
layer says ``1.6 MB`` or lays out a table as every other output does.

Human output only; ``--json`` keeps the exact numbers (bytes, seconds, Unix times). Sizes are
decimal (1 MB = 1,000,000 bytes), as ``ls -h --si``, the AWS CLI and Hugging Face's CLI print
them; times are UTC, the clock CI logs and fleets share.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

ABSENT = "-"
"""What a table or line shows for a value that does not exist (never Python's ``None``)."""

_SIZE_UNITS = ("kB", "MB", "GB", "TB", "PB")


def size(n_bytes: int) -> str:
    """``1600000`` -> ``"1.6 MB"``: bytes in decimal units, three significant digits at most
    (``"512 B"``, ``"1.0 kB"``, ``"23.5 GB"``, ``"123 MB"``)."""
    if n_bytes < 1000:
        return f"{n_bytes} B"
    value = float(n_bytes)
    for unit in _SIZE_UNITS:
        value /= 1000
        if value < 999.95 or unit == _SIZE_UNITS[-1]:
            return f"{value:.0f} {unit}" if value >= 99.95 else f"{value:.1f} {unit}"
    raise AssertionError("unreachable")


def when(unix_seconds: float) -> str:
    """``1795917780`` -> ``"2026-11-30 02:03 UTC"``: a point in time, to the minute, in UTC."""
    moment = datetime.fromtimestamp(unix_seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M UTC")


def duration(seconds: float) -> str:
    """A span of time: ``"0.4 s"``, ``"42 s"``, ``"5 min 3 s"``, ``"2 h 5 min"``, ``"3 days"``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        minutes, secs = divmod(whole, 60)
        return f"{minutes} min" + (f" {secs} s" if secs else "")
    if whole < 86400:
        hours, minutes = divmod(whole // 60, 60)
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    return count(whole // 86400, "day")


def ago(unix_seconds: float, now: float | None = None) -> str:
    """How long before ``now`` (default: the clock) a moment was, coarsely: ``"just now"``,
    ``"42 s ago"``, ``"5 min ago"``, ``"3 h ago"``, ``"2 days ago"``; ``"in 5 min"`` for a
    moment ahead (a clock skewed between machines)."""
    delta = (time.time() if now is None else now) - unix_seconds
    span = abs(delta)
    if span < 1:
        return "just now"
    if span < 60:
        text = f"{int(span)} s"
    elif span < 3600:
        text = f"{int(span // 60)} min"
    elif span < 86400:
        text = f"{int(span // 3600)} h"
    else:
        text = count(int(span // 86400), "day")
    return f"{text} ago" if delta > 0 else f"in {text}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``count(1, "unit")`` -> ``"1 unit"``; ``count(2, "unit")`` -> ``"2 units"``;
    ``plural`` for nouns that do not take an ``s`` (``count(2, "entry", "entries")``)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def text(value: object) -> str:
    """``str(value)``, or :data:`ABSENT` for ``None``."""
    return ABSENT if value is None else str(value)


def format_table(rows: list[list[str]], indent: str = "") -> list[str]:
    """Left-aligned columns, two spaces apart, the first row being the header."""
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [
        (indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True))).rstrip()
        for row in rows
    ]
