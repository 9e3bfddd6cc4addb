"""A node's memory of what it served under each ref: rollback protection (issue 43 item 2).

A store writer who cannot sign can still point a ref back at an older build a trusted key once
signed (TUF's rollback attack). So a node under a trust policy records, per store and ref, when
the newest signature it accepted for that ref was made (:func:`~.statement.signed_time`) and the
manifest it named, and refuses a build under that ref whose newest accepted signature is older,
unless the operator passes ``serve --rollback``. A deliberate rollback is signed: ``sign`` the
older manifest again (its new signature is the newest), and every node takes it.

The record is ``$XDG_CACHE_HOME/neuronbuild/trust/served.json`` (:func:`record_path`), node-local
like the layouts, written whole through a temporary file and a rename under a lock, so two
``serve`` processes never lose each other's entries and a crash leaves the old record or the
new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from filelock import FileLock

from neuronbuild import envs
from neuronbuild.attest.statement import iso_time
from neuronbuild.digest import short
from neuronbuild.errors import UserError


class RolledBack(UserError):
    """A ref now names a build signed before the one this node served under it (exit 2)."""


def record_path() -> Path:
    """The node's record of served refs (see the module docstring)."""
    return envs.user_cache() / "trust" / "served.json"


def _read(path: Path) -> dict[str, Any]:
    """The record, or an empty one where it is absent or not a JSON object (a damaged record
    is rewritten, not trusted)."""
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def check_served(
    store: str,
    ref: str,
    digest: str,
    signed: float | None,
    *,
    rollback: bool = False,
    record: bool = True,
) -> None:
    """Refuse ``digest`` under ``ref`` of ``store`` (its URL) when its newest accepted
    signature (``signed``, seconds since the epoch; None: it states no time) is older than the
    one this node last served under that ref, unless ``rollback``; then, with ``record``, make
    it the ref's entry. The same manifest is never a rollback (a newer signature of it may
    have been replaced by an older one, which changes nothing served).

    Raises:
        RolledBack: one line naming both builds, their signature times and the two ways on.
        UserError: the record cannot be written (with ``record``): one line naming its folder.
    """
    path = record_path()
    try:
        _check(path, f"{store} {ref}", ref, digest, signed, rollback=rollback, record=record)
    except OSError as exc:  # a node that cannot keep the record would forget every rollback
        raise UserError(
            f"{path}: cannot record what this node serves under {ref} (rollback protection): "
            f"{exc.strerror or exc}; make that folder writable, or set XDG_CACHE_HOME to one"
        ) from None


def _check(
    path: Path,
    key: str,
    ref: str,
    digest: str,
    signed: float | None,
    *,
    rollback: bool,
    record: bool,
) -> None:
    """:func:`check_served` on the record at ``path``, entry ``key``."""
    lock = FileLock(str(path) + ".lock") if record else contextlib.nullcontext()
    if record:
        path.parent.mkdir(parents=True, exist_ok=True)
    with lock:
        table = _read(path)
        entry = table.get(key)
        seen: dict[str, Any] = entry if isinstance(entry, dict) else {}
        stated = seen.get("signed")
        last = float(stated) if isinstance(stated, int | float) else None
        older = last is not None and (signed is None or signed < last)
        if older and not rollback and seen.get("manifest") != digest:
            when = "states no time" if signed is None else f"was made {iso_time(signed)}"
            raise RolledBack(
                f"{ref} ({short(digest)}) is a rollback: its newest signature {when}, before "
                f"that of {short(str(seen.get('manifest')))}, which this node served under "
                f"{ref} ({iso_time(last or 0.0)}, {path}); sign the older build again to roll back "
                "(neuronbuild sign), or pass serve --rollback"
            )
        if not record or (older and not rollback):
            return
        table[key] = {"manifest": digest, "signed": signed}
        with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as out:
            try:
                json.dump(table, out, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            except OSError:
                os.unlink(out.name)
                raise
        os.replace(out.name, path)
