"""A trust policy's ref patterns (``refs[].match``) as regular expressions over ``<name>/<tag>``.

fnmatch's ``*`` matches ``/`` too, so ``app*`` would cover ``app-canary/prod``, a name the policy
never meant; here, as in a shell's globs over paths, ``*`` stops at ``/``:

- ``*``: any run of characters but ``/`` (``app/*``: every tag of ``app``);
- ``?``: one character but ``/``;
- ``**``: any run of characters, ``/`` included (``**``: every ref; ``app**``: every tag of every
  name starting ``app``);
- any other character: itself. Only the characters of a ref (:data:`neuronbuild.store.layout.
  REF_PART`, ``/``, and ``:`` of a digest tag) and the wildcards may appear: fnmatch's ``[...]``
  classes are refused rather than silently matching no ref.

A pattern that can match no ref at all (``*``, ``app``, ``a/b/c``: every ref holds exactly one
``/``; ``app/-x``: a tag starts with a letter or digit) is refused too: a policy naming ``*``
would otherwise look as if it protected every ref while ``tag`` found every ref unprotected.
:func:`example_ref` decides it exactly, by walking the pattern against the ref grammar.
"""

from __future__ import annotations

import re

from neuronbuild.errors import UserError

PATTERN_CHARS = re.compile(r"[A-Za-z0-9._:/*?-]+")
"""What a pattern may hold: a ref's characters and the wildcards."""

MAX_PATTERN_CHARS = 300
"""Longest pattern read: a ref is at most 257 characters (two parts of 128 and the ``/``)."""

_WILDCARD = re.compile(r"\*\*|\*|\?")
_MEANING = {"**": ".*", "*": "[^/]*", "?": "[^/]"}


def compile_pattern(pattern: str, field: str) -> re.Pattern[str]:
    """The expression ``pattern`` means, matched against a whole ref (``fullmatch``).

    Raises:
        UserError: ``pattern`` is empty, longer than :data:`MAX_PATTERN_CHARS`, holds a
            character no ref holds, or matches no ref (:func:`example_ref`); ``field`` names it.
    """
    if not pattern:
        raise UserError(f"{field}: empty; give a pattern over <name>/<tag>, such as app/*")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise UserError(
            f"{field}: {len(pattern)} characters; a ref is at most 257, so a pattern is at most "
            f"{MAX_PATTERN_CHARS}"
        )
    if not PATTERN_CHARS.fullmatch(pattern):
        bad = "".join(sorted(set(re.sub(PATTERN_CHARS, "", pattern))))
        raise UserError(
            f"{field}: {ascii(pattern)[:80]} holds characters no ref holds ({bad!a}); a pattern is "
            "a ref's letters, digits, . _ - : / and the wildcards * (not /), ** (any) and ?"
        )
    if example_ref(pattern) is None:
        raise UserError(
            f"{field}: {ascii(pattern)[:80]} matches no ref (a ref is <name>/<tag>: one /, each "
            "part starting with a letter or digit); write name/* for every tag of a name, or ** "
            "for every ref"
        )
    return translate(pattern)


def translate(pattern: str) -> re.Pattern[str]:
    """``pattern``'s meaning as a regular expression (to ``fullmatch`` a ref), unchecked."""
    parts, at = [], 0
    for wildcard in _WILDCARD.finditer(pattern):
        parts.append(re.escape(pattern[at : wildcard.start()]))
        parts.append(_MEANING[wildcard.group()])
        at = wildcard.end()
    parts.append(re.escape(pattern[at:]))
    return re.compile("".join(parts))


_PART_MAX = 128  # neuronbuild.store.layout.REF_PART's longest segment
_DIGEST_TAG = "sha256:"
_HEX = "0123456789abcdef"
# One character of each kind the ref grammar tells apart (the digest tag's letters, hex digits,
# other letters, the punctuation a part may hold, ':' and '/'): what a wildcard may stand for.
_ALPHABET = tuple(dict.fromkeys(_DIGEST_TAG + _HEX + "xA._-/"))
_PART_CHARS = re.compile(r"[A-Za-z0-9._-]")

# A state of the ref grammar: (part, characters read in it, whether the tag so far is a prefix
# of "sha256"); part is "name", "tag" or "digest" (the 64 hex digits after "sha256:").
_State = tuple[str, int, bool]


def _step(state: _State, char: str) -> _State | None:
    part, n, digest_prefix = state
    if part == "digest":
        return ("digest", n + 1, False) if char in _HEX and n < 64 else None
    if part == "name" and char == "/":
        return ("tag", 0, True) if n else None
    if part == "tag" and char == ":" and digest_prefix and n == len(_DIGEST_TAG) - 1:
        return ("digest", 0, False)
    if n >= _PART_MAX or not _PART_CHARS.fullmatch(char) or (n == 0 and not char.isalnum()):
        return None
    return (part, n + 1, digest_prefix and n < 6 and _DIGEST_TAG[n] == char)


def _accepts(state: _State) -> bool:
    part, n, _ = state
    return (part == "tag" and n > 0) or (part == "digest" and n == 64)


def _tokens(pattern: str) -> list[str]:
    """``pattern`` as its characters and wildcards (``**``, ``*``, ``?``), in order."""
    tokens: list[str] = []
    at = 0
    for wildcard in _WILDCARD.finditer(pattern):
        tokens += pattern[at : wildcard.start()]
        tokens.append(wildcard.group())
        at = wildcard.end()
    return tokens + list(pattern[at:])


def example_ref(pattern: str) -> str | None:
    """A ref (``<name>/<tag>``, each part :data:`~neuronbuild.store.layout.REF_PART`, or
    ``<name>/sha256:<64 hex>``) that ``pattern`` matches, or None when it matches none.

    A breadth-first walk of the pattern's tokens against the ref grammar's states; each
    wildcard stands for one character of each kind the grammar tells apart, so the answer is
    exact. Time: tokens x a few hundred states x 28 characters, at most.
    """
    tokens = _tokens(pattern)
    start: tuple[int, _State] = (0, ("name", 0, False))
    came_from: dict[tuple[int, _State], tuple[tuple[int, _State], str] | None] = {start: None}
    queue = [start]
    for node in queue:  # grows as it is walked: breadth first
        i, state = node
        if i == len(tokens):
            if _accepts(state):
                text = []
                while (back := came_from[node]) is not None:
                    node, char = back
                    text.append(char)
                return "".join(reversed(text))
            continue
        token = tokens[i]
        moves: list[tuple[tuple[int, _State], str]] = []
        if token in ("*", "**"):
            moves.append(((i + 1, state), ""))
            chars = [c for c in _ALPHABET if token == "**" or c != "/"]
            moves += [((i, s), c) for c in chars if (s := _step(state, c)) is not None]
        elif token == "?":
            moves += [((i + 1, s), c) for c in _ALPHABET if c != "/" and (s := _step(state, c))]
        elif (s := _step(state, token)) is not None:
            moves.append(((i + 1, s), token))
        for target, char in moves:
            if target not in came_from:
                came_from[target] = (node, char)
                queue.append(target)
    return None


def _advance(tokens: list[str], states: frozenset[int], char: str | None) -> frozenset[int]:
    """The positions in ``tokens`` a pattern can be at after reading ``char`` from ``states``
    (None: none read), each with the wildcards it may then skip (matching nothing)."""
    reached = set(states)
    if char is not None:
        reached = set()
        for i in states:
            token = tokens[i] if i < len(tokens) else None
            if token == "**" or (token == "*" and char != "/"):
                reached.add(i)
            elif token == char or (token == "?" and char != "/"):
                reached.add(i + 1)
    for i in sorted(reached):  # a wildcard may match nothing: the next token too
        while i < len(tokens) and tokens[i] in ("*", "**"):
            i += 1
            reached.add(i)
    return frozenset(reached)


def covers(outer: str, inner: str) -> bool:
    """Whether pattern ``outer`` matches every ref pattern ``inner`` matches: then a rule of
    ``inner`` listed after one of ``outer`` never applies (first match wins).

    A breadth-first walk of both patterns side by side against the ref grammar (as
    :func:`example_ref`), each wildcard standing for one character of each kind the grammar
    and either pattern's own characters tell apart, so the answer is exact: False as soon as a
    ref ``inner`` matches and ``outer`` does not is found.
    """
    a, b = _tokens(outer), _tokens(inner)
    literal = {t for t in a + b if t not in ("*", "**", "?")}
    fresh = next(c for c in "xyzwvuXYZWVU" if c not in literal)  # a letter neither names
    alphabet = tuple(dict.fromkeys((*_ALPHABET, *sorted(literal), fresh)))
    start = (_advance(a, frozenset({0}), None), _advance(b, frozenset({0}), None))
    seen = {(*start, ("name", 0, False))}
    queue = list(seen)
    for at_a, at_b, state in queue:  # grows as it is walked: breadth first
        for char in alphabet:
            step = _step(state, char)
            next_b = _advance(b, at_b, char) if step is not None else frozenset()
            if not next_b or step is None:
                continue
            next_a = _advance(a, at_a, char)
            if len(b) in next_b and _accepts(step) and len(a) not in next_a:
                return False
            node = (next_a, next_b, step)
            if node not in seen:
                seen.add(node)
                queue.append(node)
    return True
