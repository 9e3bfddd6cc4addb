"""Reading a file a user names (a recipe, a policy, a key, a trust config) or a store folder
holds, within bounds, and its YAML with every key once: the one reader of such files.

A file is opened without blocking and checked to be a regular file before a byte is read: a FIFO
with no writer would block ``open`` forever, a device such as ``/dev/zero`` would be read
forever. At most the caller's limit plus one byte is read, so a file over it is told apart from
one exactly at it. Each caller words the refusal for its own file (:class:`Unreadable` carries
what went wrong, not a message).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from neuronbuild.errors import NOT_A_VALUE, RecipeError

if TYPE_CHECKING:
    import yaml


class Unreadable(Exception):
    """Why :func:`read_bounded` refused a file: ``problem`` is ``open`` (it cannot be opened or
    read; ``detail``: the system's reason), ``kind`` (not a regular file; ``detail``: ``a
    directory``, ``a FIFO``, ``a socket`` or ``a device``) or ``size`` (over the limit;
    ``detail``: the limit in bytes, as text)."""

    def __init__(self, problem: Literal["open", "kind", "size"], detail: str) -> None:
        super().__init__(f"{problem}: {detail}")
        self.problem, self.detail = problem, detail


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "a device"


def open_regular(path: str | Path) -> int:
    """A read descriptor of ``path`` (close-on-exec), opened without blocking and checked to be
    a regular file before it is returned.

    Raises:
        Unreadable: ``kind``: it is no regular file.
        OSError: it cannot be opened (``FileNotFoundError`` and the rest, as ``os.open`` raises
            them, so a caller can tell a missing file from a fault).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        os.close(fd)
        raise
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise Unreadable("kind", _kind(mode))
    return fd


def read_bounded(path: str | Path, limit: int) -> bytes:
    """The bytes of regular file ``path``, at most ``limit`` bytes.

    Raises:
        Unreadable: it cannot be opened or read, is no regular file, or holds more than
            ``limit`` bytes.
    """
    try:
        fd = open_regular(path)
    except OSError as exc:
        raise Unreadable("open", str(exc.strerror or exc)) from None
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise Unreadable("open", str(exc.strerror or exc)) from None
    finally:
        os.close(fd)
    if len(data) > limit:
        raise Unreadable("size", str(limit))
    return data


class DuplicateKeys(ValueError):
    """A YAML document holds a key twice in one mapping: one :class:`RecipeError` each in
    ``errors`` (:func:`duplicate_keys`)."""

    def __init__(self, errors: list[RecipeError]) -> None:
        super().__init__(str(errors[0]))
        self.errors = errors


def load_yaml_unique(text: str | bytes) -> Any:
    """The one YAML document in ``text`` (safe types only), refusing a key given twice in one
    mapping (:func:`duplicate_keys`).

    Raises:
        DuplicateKeys: a key appears twice in one mapping. yaml.YAMLError: not valid YAML.
    """
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        errors = duplicate_keys(node)
        if errors:
            raise DuplicateKeys(errors)
        return None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def duplicate_keys(node: yaml.Node | None, path: str = "") -> list[RecipeError]:
    """One error per key that a mapping under ``node`` (a composed YAML document) holds twice,
    naming its dotted path and both lines (1-based).

    YAML 1.2 requires a mapping's keys to be unique (spec section 3.2.1.1); pyyaml keeps the
    last value silently, so a recipe edited in two places would compile what nobody reads.
    Keys compare as the Python values they load as, the way the loaded mapping would merge them
    (``1`` and ``"1"`` differ; ``true``, ``True`` and ``1`` do not); an alias is walked once.
    """
    import yaml

    errors: list[RecipeError] = []
    seen: set[int] = set()
    constructor = yaml.SafeLoader("")

    def walk(node: yaml.Node, path: str) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, f"{path}[{i}]")
        if not isinstance(node, yaml.MappingNode):
            return
        lines: dict[Any, int] = {}  # key -> the line it first appears on
        for key_node, value_node in node.value:
            child = path
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                child = f"{path}.{key_node.value}" if path else str(key_node.value)
                line = key_node.start_mark.line + 1
                try:
                    key = constructor.construct_object(key_node)
                    first = lines.get(key)
                    lines.setdefault(key, line)
                except (TypeError, yaml.YAMLError):  # unhashable or unreadable: not a duplicate
                    first = None
                if first is not None:
                    where = f"lines {first} and {line}" if first != line else f"line {line}"
                    errors.append(
                        RecipeError(
                            child,
                            NOT_A_VALUE,
                            f"duplicate key, at {where}; YAML would keep only the last "
                            "silently: delete one",
                        )
                    )
            walk(value_node, child)

    if node is not None:
        walk(node, path)
    return errors
