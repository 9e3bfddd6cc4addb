"""This host's own records of what it checked by hashing (a node image's files, a model's
weights): JSON under the user's cache, named by what they are about, written atomically, and
read as a hint (a record that is absent, unreadable or malformed means: hash again, never an
error).

They trust a file from its ``stat`` while it keeps its device, inode, size, mtime and ctime
(which no write can set back), as the lay-out stamp does (:mod:`.materialize`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

from neuronbuild import envs
from neuronbuild.digest import canonical_json


def record_path(kind: str, *about: str) -> Path:
    """Where this host keeps its record of ``kind`` about ``about`` (a path and a digest, say):
    ``$XDG_CACHE_HOME/neuronbuild/<kind>/<32 hex of them>.json``."""
    where = hashlib.sha256("\n".join(about).encode()).hexdigest()[:32]
    return envs.user_cache() / kind / f"{where}.json"


def read_record(path: Path) -> dict[str, Any] | None:
    """The record at ``path``, or None when absent, unreadable or not a JSON object."""
    try:
        value = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def write_record(path: Path, value: Any) -> None:
    """Write ``value`` at ``path`` as canonical JSON, atomically (a temporary file of a unique
    name, renamed: two processes, or two containers sharing the cache, each write whole);
    nothing when the cache is read-only (the next check hashes again)."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
        try:
            partial.write_bytes(canonical_json(value))
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)


def stat_key(path: Path) -> list[int]:
    """``[device, inode, size, mtime ns, ctime ns]`` of ``path`` (through a link: a hub snapshot
    links each file to its blob)."""
    st = path.stat()
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]
