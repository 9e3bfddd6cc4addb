"""Whether a local folder can be written, or created, probed without leaving anything behind.

A dry run checks what the real run will write (the store folder, the log folder, the local
tier) but must write nothing: the probe is an anonymous temporary file in the folder, or, for a
folder that does not exist yet, in its nearest existing parent, where the real run's ``mkdir``
would create it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from neuronbuild.errors import UserError


class FolderInTheWay(UserError):
    """A file stands where a folder (or one of its parents) must be: exit code 2."""


def check_writable_folder(folder: Path) -> None:
    """Raise unless this process can write in ``folder``, or create it.

    The answer comes from creating and removing a temporary file (``tempfile.TemporaryFile``)
    in ``folder`` or its nearest existing parent, not from permission bits: a read-only mount
    or an ACL refuses the probe as it would refuse the real write.

    Raises:
        FolderInTheWay: ``folder`` or a parent is a file. OSError: the probe was refused (its
            ``strerror`` says why; ``filename`` is where it was tried).
    """
    where = folder.absolute()
    while not where.exists() and where != where.parent:
        where = where.parent
    if not where.is_dir():
        raise FolderInTheWay(f"{where} is a file, not a folder")
    try:
        with tempfile.TemporaryFile(dir=where):
            pass
    except OSError as exc:
        exc.filename = str(where)
        raise


BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
"""Linux's id of the running boot: a new random value at every boot (random(4))."""


def boot_id() -> str | None:
    """This machine's boot id (:data:`BOOT_ID`), or None where the kernel gives none.

    What a process wrote and did not ``fsync`` is lost only with the machine (a kernel crash,
    a power cut), never with the process: the page cache keeps it for every reader until the
    machine stops. So a record that trusts files from their ``stat`` (a lay-out stamp, a
    weights check) holds within the boot it was written in; after a reboot the files are
    hashed again, and a torn one is fetched again, without an ``fsync`` per file."""
    try:
        return BOOT_ID.read_text().strip() or None
    except OSError:
        return None
