"""Reading a small file a user names for signing or trust (a key file, a policy, a trust config):
the kernel's bounded reader (:func:`neuronbuild.user_files.read_bounded`), its refusal worded as
the option or policy field that named the file, once the file is known to be writable by no one
but its owner and root (sshd's ``StrictModes``)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from neuronbuild.errors import UserError
from neuronbuild.user_files import Unreadable, read_bounded


def read_small_file(path: Path, limit: int, what: str, expected: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` bytes.

    ``what`` names the file in messages (the option or policy field, ``--policy``,
    ``signers.ci.keys[0]``); ``expected`` says what it should be (``a PEM key file``).

    Raises:
        UserError: one line, ``<what> <path>: ...``: it cannot be opened; it is a directory,
            FIFO, socket or device; it is larger than ``limit`` bytes; or another user could
            have written it (:func:`check_owned`).
    """
    check_owned(path, what)
    try:
        return read_bounded(path, limit)
    except Unreadable as exc:
        problem = {
            "open": f"cannot read it ({exc.detail})",
            "kind": f"{exc.detail}, not a regular file; give {expected}",
            "size": f"larger than {limit} bytes; not {expected}",
        }[exc.problem]
        raise UserError(f"{what} {path}: {problem}") from None


def check_owned(path: Path, what: str) -> None:
    """Refuse a trust file another user could have written, as sshd's ``StrictModes`` refuses
    an ``authorized_keys`` (``auth.c``, ``secure_permissions``): the file must be owned by this
    user or root and not writable by everyone, and its folder not writable by everyone unless
    sticky (as ``/tmp``: no one may then replace another's file). sshd also refuses a
    group-writable file; that is kept, as a CI checkout's group is often the team's. A file
    that cannot be stat'ed is left to the read, which says why.

    Raises:
        UserError: one line naming ``what``, the path, who could write it and the ``chmod`` or
            ``chown`` that fixes it.
    """
    try:
        file, folder = os.stat(path), os.stat(path.parent)
    except OSError:
        return
    if file.st_uid not in (0, os.getuid()):
        raise UserError(
            f"{what} {path}: owned by uid {file.st_uid}, not by you or root, who alone may "
            f"write a trust file; chown it (or copy it to a file of yours)"
        )
    if file.st_mode & stat.S_IWOTH:
        raise UserError(
            f"{what} {path}: writable by every user, so anyone could change what it trusts; "
            f"chmod o-w {path}"
        )
    if folder.st_mode & stat.S_IWOTH and not folder.st_mode & stat.S_ISVTX:
        raise UserError(
            f"{what} {path}: its folder {path.parent} is writable by every user, so anyone "
            f"could replace the file; chmod o-w {path.parent} (or set its sticky bit, +t)"
        )
