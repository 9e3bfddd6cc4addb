"""Credentials cut out of everything the CLI prints (issue 43 item 7): a URL's userinfo
(``https://user:password@host``, ``s3://KEY:SECRET@bucket``) and its query's values (a presigned
URL's ``X-Amz-Signature=``, an Azure SAS's ``sig=``, a token in ``?token=``) become ``***``,
wherever the URL appears: an error line, a ``retrying`` note, a ``--json`` document. Applied once,
to standard output and error (:class:`neuronbuild.ui.streams.WatchedStream`), so no message
needs to remember it."""

from __future__ import annotations

import re

URL = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<rest>[^\s'\"<>\\]*)")
"""A URL in text: its scheme, then everything up to a space, a quote, ``<``, ``>`` or ``\\``."""
MASK = "***"


def _url(match: re.Match[str]) -> str:
    scheme, whole = match["scheme"], match["rest"]
    rest = whole.rstrip(":,.;)]}")  # the sentence's punctuation after the URL stays
    after = whole[len(rest) :]
    cut = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
    query = min((rest.find(c) for c in "?#" if c in rest), default=len(rest))
    at, colon = rest.rfind("@", 0, query), rest.find(":")
    # userinfo ends at the last @ of the authority, or, for a password holding "/" (half of
    # AWS secret keys: s3://KEY:SE/CRET@bucket), at the @ after "user:" where what follows the
    # colon is no port (host:5000/repo@sha256:... is a path).
    secret_with_slash = 0 <= colon < cut < at and not rest[colon + 1 : cut].isdigit()
    if "@" in rest[:cut] or secret_with_slash:
        end = rest.rfind("@", 0, cut) if "@" in rest[:cut] else rest.find("@", colon)
        rest = f"{MASK}@{rest[end + 1 :]}"
        cut = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    path, mark, query = tail.partition("?")
    if mark:
        query, hash_, fragment = query.partition("#")
        fields = (f"{p.partition('=')[0]}={MASK}" if "=" in p else p for p in query.split("&"))
        tail = f"{path}?{'&'.join(fields)}{hash_}{fragment}"
    return f"{scheme}{authority}{tail}{after}"


def redact(text: str) -> str:
    """``text`` with every URL's userinfo and query values replaced by ``***`` (the rest of
    the URL, and all other text, kept as it is)."""
    return URL.sub(_url, text) if "://" in text else text
