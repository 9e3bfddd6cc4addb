"""Human output reads as other tools' does: decimal sizes, UTC times, spans and ages, plurals,
and ``-`` for an absent value (``--json`` keeps the exact numbers: tests/cli/test_json_schemas.py)."""

from __future__ import annotations

import pytest

from neuronbuild.human import ABSENT, ago, count, duration, size, text, when


@pytest.mark.parametrize(
    ("n_bytes", "shown"),
    [
        (0, "0 B"),
        (1, "1 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (1_600_000, "1.6 MB"),
        (99_949_999, "99.9 MB"),
        (123_000_000, "123 MB"),
        (999_999, "1.0 MB"),  # never "1000.0 kB"
        (23_500_000_000, "23.5 GB"),
        (7 * 10**15, "7.0 PB"),
        (2 * 10**18, "2000 PB"),
    ],
)
def test_sizes_are_decimal_with_at_most_one_decimal(n_bytes: int, shown: str) -> None:
    assert size(n_bytes) == shown


def test_times_are_utc_to_the_minute() -> None:
    assert when(1796004180) == "2026-11-30 02:03 UTC"
    assert when(0) == "1970-01-01 00:00 UTC"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0.0, "0.0 s"),
        (4.24, "4.2 s"),
        (42.4, "42 s"),
        (59.6, "1 min"),
        (303, "5 min 3 s"),
        (7500, "2 h 5 min"),
        (7200, "2 h"),
        (86400, "1 day"),
        (3 * 86400 + 5, "3 days"),
    ],
)
def test_durations(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown


@pytest.mark.parametrize(
    ("before", "shown"),
    [
        (0.4, "just now"),
        (42, "42 s ago"),
        (300, "5 min ago"),
        (3 * 3600 + 59, "3 h ago"),
        (86400, "1 day ago"),
        (2 * 86400, "2 days ago"),
        (-300, "in 5 min"),  # a clock ahead of this one
    ],
)
def test_ages(before: float, shown: str) -> None:
    assert ago(1_000_000 - before, now=1_000_000) == shown


def test_plurals() -> None:
    assert count(0, "unit") == "0 units"
    assert count(1, "unit") == "1 unit"
    assert count(2, "unit") == "2 units"
    assert count(1, "entry", "entries") == "1 entry"
    assert count(3, "entry", "entries") == "3 entries"


def test_an_absent_value_is_a_dash_never_none() -> None:
    assert text(None) == ABSENT == "-"
    assert text(0) == "0"
    assert text("sha256:ab") == "sha256:ab"
