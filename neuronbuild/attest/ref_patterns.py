"""A trust policy's ref patterns (``refs[].match``) as regular expressions over ``<name>/<tag>``.

fnmatch's ``*`` matches ``/`` too, so ``app*`` would cover ``app-canary/prod``, a name the policy
never meant; here, as in a shell's globs over paths, ``*`` stops at ``/``:

- ``*``: any run of characters but ``/`` (``app/*``: every tag of ``app``; ``*`` alone: no ref,
  since every ref holds a ``/``);
- ``?``: one character but ``/``;
- ``**``: any run of characters, ``/`` included (``**``: every ref; ``app**``: every tag of every
  name starting ``app``);
- any other character: itself. Only the characters of a ref (:data:`neuronbuild.store.layout.
  REF_PART`, ``/``, and ``:`` of a digest tag) and the wildcards may appear: fnmatch's ``[...]``
  classes are refused rather than silently matching no ref.
"""

from __future__ import annotations

import re

from neuronbuild.errors import UserError

PATTERN_CHARS = re.compile(r"[A-Za-z0-9._:/*?-]+")
"""What a pattern may hold: a ref's characters and the wildcards."""

_WILDCARD = re.compile(r"\*\*|\*|\?")
_MEANING = {"**": ".*", "*": "[^/]*", "?": "[^/]"}


def compile_pattern(pattern: str, field: str) -> re.Pattern[str]:
    """The expression ``pattern`` means, matched against a whole ref (``fullmatch``).

    Raises:
        UserError: ``pattern`` is empty or holds a character no ref holds (``field`` names it).
    """
    if not pattern:
        raise UserError(f"{field}: empty; give a pattern over <name>/<tag>, such as app/*")
    if not PATTERN_CHARS.fullmatch(pattern):
        bad = "".join(sorted(set(re.sub(PATTERN_CHARS, "", pattern))))
        raise UserError(
            f"{field}: {ascii(pattern)[:80]} holds characters no ref holds ({bad!a}); a pattern is "
            "a ref's letters, digits, . _ - : / and the wildcards * (not /), ** (any) and ?"
        )
    parts, at = [], 0
    for wildcard in _WILDCARD.finditer(pattern):
        parts.append(re.escape(pattern[at : wildcard.start()]))
        parts.append(_MEANING[wildcard.group()])
        at = wildcard.end()
    parts.append(re.escape(pattern[at:]))
    return re.compile("".join(parts))
