"""How many examples a property test draws: its full count on demand, a fraction of it in CI.

``NEURONBUILD_PROPERTIES=full`` runs each property test with the count it names; otherwise (CI,
``make test``) with half of it, at least 20, so the suite fits CI's time (issue 40) while every
property still runs. Hypothesis keeps the failing examples it found in its database and replays
them first, whichever count is in force.
"""

from __future__ import annotations

import os

VARIABLE = "NEURONBUILD_PROPERTIES"


def examples(full: int) -> int:
    """``full`` under ``NEURONBUILD_PROPERTIES=full``, else half of it (at least 20, never more
    than ``full``)."""
    if os.environ.get(VARIABLE) == "full":
        return full
    return min(full, max(20, full // 2))
