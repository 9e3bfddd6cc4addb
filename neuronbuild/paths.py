"""A path a manifest or an image names, kept inside the folder it is laid out in."""

from __future__ import annotations

from pathlib import Path

from neuronbuild.errors import StoreDataInvalid


def inside(root: Path, rel: str) -> Path:
    """``root / rel`` with its folders resolved, refusing a path whose folder resolves outside
    ``root`` (a symlinked folder planted there, say). The last component is not followed: a
    symlink planted where a file belongs names itself, so that a writer replaces the link
    (a rename over it) instead of writing through it into another file, and a reader sees a
    link, not a file.

    Raises:
        StoreDataInvalid: the path escapes ``root``, or names no file (empty, ``.``, ``..``).
    """
    path = root / rel
    folder = path.parent.resolve()
    if path.name in ("", ".", "..") or not folder.is_relative_to(root.resolve()):
        raise StoreDataInvalid(f"manifest path {rel!r} escapes {root}")
    return folder / path.name
