"""The environment the user started the command with, before this process changed any of it.

Importing torch's Inductor sets ``TORCHINDUCTOR_CACHE_DIR`` in the process's own environment
(cpu-engine-facts.md), so a key read from ``os.environ`` after that import held a value the user
never set, and the next command, started from a plain shell, missed. Keys and engine environments
read this snapshot instead: it is taken when ``neuronbuild`` is first imported, before anything
that could import torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

_STARTED_WITH: dict[str, str] = dict(os.environ)


def environ() -> Mapping[str, str]:
    """The variables this process was started with (a read-only view of the snapshot)."""
    return dict(_STARTED_WITH)
