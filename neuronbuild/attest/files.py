"""Reading a small file a user names for signing or trust (a key file, a policy): a regular file,
read with a byte limit.

The file is opened without blocking and checked to be a regular file before a byte is read, as
the store refuses a FIFO in its folders (:func:`neuronbuild.store.backends._open_regular`) and
``read_recipe_text`` a recipe that is one: a FIFO with no writer would block ``open`` forever,
and a device such as ``/dev/zero`` would be read forever.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from neuronbuild.errors import UserError


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def read_small_file(path: Path, limit: int, what: str, expected: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` bytes.

    ``what`` names the file in messages (the option or policy field, ``--policy``,
    ``signers.ci.keys[0]``); ``expected`` says what it should be (``a PEM key file``).

    Raises:
        UserError: one line, ``<what> <path>: ...``: it cannot be opened; it is a directory,
            FIFO, socket or device; or it is larger than ``limit`` bytes.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UserError(f"{what} {path}: {_kind(mode)}, not a regular file; give {expected}")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise UserError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise UserError(f"{what} {path}: larger than {limit} bytes; not {expected}")
    return data
