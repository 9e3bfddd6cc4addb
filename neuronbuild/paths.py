"""A path a manifest or an image names, kept inside the folder it is laid out in."""

from __future__ import annotations

from pathlib import Path

from neuronbuild.errors import StoreDataInvalid


def inside(root: Path, rel: str) -> Path:
    """``root / rel``, refusing a path that resolves outside ``root`` (a symlink planted in the
    folder, say).

    Raises:
        StoreDataInvalid: the path escapes ``root``.
    """
    dest = (root / rel).resolve()
    if not dest.is_relative_to(root.resolve()):
        raise StoreDataInvalid(f"manifest path {rel!r} escapes {root}")
    return dest
