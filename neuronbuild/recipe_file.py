"""Read a recipe file within the bounds a config file keeps: size, nesting, node count, no
anchors or aliases, integers of sane length.

A recipe is config, not a program: as the store bounds each record it reads
(:data:`neuronbuild.store.layout.MAX_RECORD_BYTES`), a recipe is read with a byte limit and its
YAML events are checked before anything is built from them, so a hostile or mistaken file is
refused in one line, fast: a YAML alias bomb (a few hundred bytes that expand to billions of
nodes), a device or FIFO given as the recipe (``/dev/zero`` would be read forever), nesting deep
enough to exhaust Python's stack (PyYAML composes recursively, and its scanner slows down
quadratically with the depth of flow nesting), or an integer longer than Python converts
(4,300 digits, ``sys.int_info.default_max_str_digits``).
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import yaml

from neuronbuild.errors import NOT_A_VALUE, RecipeError, RecipeInvalid
from neuronbuild.human import size

MAX_RECIPE_BYTES = 256 << 10
"""Largest recipe file read (bytes); the checked-in recipes are about 1 KiB."""
MAX_DEPTH = 16
"""Deepest nesting of mappings and sequences (the top-level mapping is 1;
``additional_config.neuron_config`` lists are at 4)."""
MAX_NODES = 20_000
"""Most YAML nodes (scalars, mappings, sequences) one recipe may hold; bounds the time to read
it (about 0.2 s here) whatever the file holds."""
MAX_INT_DIGITS = 30
"""Longest integer literal (digits, signs and ``_`` left out); every engine argument's range is
far below it (:data:`neuronbuild.recipe.MAX_INT`), which then names the field."""

_INT_TAG = "tag:yaml.org,2002:int"


def _refuse(source: str, hint: str) -> RecipeInvalid:
    return RecipeInvalid(source, [RecipeError("<file>", NOT_A_VALUE, hint)])


def read_recipe_text(path: str | Path) -> str:
    """The recipe file's text, read with a limit.

    The file is opened without blocking and checked to be a regular file before a byte is read
    (a FIFO, a device such as ``/dev/zero`` or a directory is refused), and at most
    :data:`MAX_RECIPE_BYTES` + 1 bytes are read.

    Raises:
        RecipeInvalid: the file cannot be opened, is not a regular file, is larger than
            :data:`MAX_RECIPE_BYTES`, or is not UTF-8.
    """
    source = str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _refuse(source, f"cannot read: {exc.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(mode) else "a device, FIFO or socket"
        raise _refuse(source, f"is {kind}, not a regular file; give the recipe's YAML file")
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_RECIPE_BYTES + 1)
    if len(data) > MAX_RECIPE_BYTES:
        raise _refuse(
            source,
            f"larger than {size(MAX_RECIPE_BYTES)}, the most a recipe may be; a recipe is "
            "vLLM's arguments, not data: move large content to files it names",
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _refuse(source, f"not UTF-8 text (byte {exc.start}); save it as UTF-8") from None


def _line(event: yaml.Event) -> int:
    mark = event.start_mark
    return 0 if mark is None else int(mark.line) + 1


def check_events(text: str, source: str) -> None:
    """Walk the YAML events of ``text`` (nothing is composed or constructed) and refuse what a
    recipe never needs, stopping at the first problem.

    Raises:
        RecipeInvalid: an anchor or alias (``&x``, ``*x``: write the value out), nesting
            deeper than :data:`MAX_DEPTH`, more than :data:`MAX_NODES` nodes, or an integer
            literal of more than :data:`MAX_INT_DIGITS` digits; each names its line.
        yaml.YAMLError: the text is not YAML (the caller reports it).
    """
    resolver = yaml.resolver.Resolver()
    depth = nodes = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _refuse(
                source,
                f"line {_line(event)}: YAML anchors and aliases (&name, *name) are not read in "
                "a recipe; write the value out where it is used",
            )
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                raise _refuse(
                    source,
                    f"line {_line(event)}: nested deeper than {MAX_DEPTH} levels; vLLM's "
                    "arguments nest a few levels at most",
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
        if isinstance(event, yaml.NodeEvent):
            nodes += 1
            if nodes > MAX_NODES:
                raise _refuse(
                    source,
                    f"line {_line(event)}: more than {MAX_NODES} values; a recipe is vLLM's "
                    "arguments, not data",
                )
        if isinstance(event, yaml.ScalarEvent) and event.implicit[0] and event.style is None:
            tag = resolver.resolve(  # type: ignore[no-untyped-call]
                yaml.ScalarNode, event.value, (True, False)
            )
            digits = re.sub(r"[^0-9A-Fa-f]", "", event.value.removeprefix("0x"))
            if tag == _INT_TAG and len(digits) > MAX_INT_DIGITS:
                raise _refuse(
                    source,
                    f"line {_line(event)}: an integer of {len(digits)} digits; no argument "
                    f"takes more than {MAX_INT_DIGITS}",
                )
