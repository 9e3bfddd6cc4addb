"""The end of a log file as lines a person reads: the one reader behind a failed unit's log
under ``-v``, a heartbeat's "last line" and the demo's server errors.

Only the last :data:`LOG_TAIL_BYTES` are read (a compiler log can be large); a line redrawn with
``\\r`` (a progress bar) counts as a line, colours are removed and empty lines skipped, so what
is shown is what a terminal showed last.
"""

from __future__ import annotations

import re
from pathlib import Path

LOG_TAIL_BYTES = 64 * 1024
"""How much of the end of a log is read."""

LOG_TAIL_LINES = 20
"""Lines shown by default (a failed unit's log under ``-v``)."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def tail_lines(path: str | Path | None, lines: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``lines`` non-empty lines of the log at ``path``, oldest first, colours removed;
    none when there is no path or the file cannot be read (a unit run on another machine)."""
    if path is None or lines <= 0:
        return []
    try:
        with open(path, "rb") as f:
            end = f.seek(0, 2)
            f.seek(max(0, end - LOG_TAIL_BYTES))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    found = (_ANSI.sub("", line).rstrip() for line in re.split(r"[\r\n]+", text))
    return [line for line in found if line.strip()][-lines:]
