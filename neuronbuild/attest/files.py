"""Reading a small file a user names for signing or trust (a key file, a policy, a trust config):
the kernel's bounded reader (:func:`neuronbuild.user_files.read_bounded`), its refusal worded as
the option or policy field that named the file."""

from __future__ import annotations

from pathlib import Path

from neuronbuild.errors import UserError
from neuronbuild.user_files import Unreadable, read_bounded


def read_small_file(path: Path, limit: int, what: str, expected: str) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` bytes.

    ``what`` names the file in messages (the option or policy field, ``--policy``,
    ``signers.ci.keys[0]``); ``expected`` says what it should be (``a PEM key file``).

    Raises:
        UserError: one line, ``<what> <path>: ...``: it cannot be opened; it is a directory,
            FIFO, socket or device; or it is larger than ``limit`` bytes.
    """
    try:
        return read_bounded(path, limit)
    except Unreadable as exc:
        problem = {
            "open": f"cannot read it ({exc.detail})",
            "kind": f"{exc.detail}, not a regular file; give {expected}",
            "size": f"larger than {limit} bytes; not {expected}",
        }[exc.problem]
        raise UserError(f"{what} {path}: {problem}") from None
