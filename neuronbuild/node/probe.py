"""A probe of a running server against the answers CI recorded for its build (issue 45 item 3).

CI asks the server it started from a build a small fixed set of greedy completions
(:data:`PROMPTS`, :data:`MAX_TOKENS` tokens each, temperature 0, the chosen token's logprob) and
records the answers beside the manifest (:class:`ProbeRecord`, ``probes/<manifest>.json`` in the
store). A node's probe asks its own server the same requests and compares: the tokens exactly, each
logprob within the recorded :data:`LOGPROB_TOLERANCE` (CPU kernels may sum in another order on
another core count; a wrong model or weights change tokens or move logprobs far more). Both sides
use vLLM's OpenAI-compatible ``/v1/completions``, so the comparison is of what clients get.

It also checks that the server compiled nothing since it started (:func:`compiled_since`): a
compile writes new entries into the engine's compile cache under the layout root, which holds
exactly the manifest's files when nothing was compiled.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from neuronbuild.digest import canonical_json, check_digest, parse_canonical
from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.store.records import Manifest

PROBE_SCHEMA = "neuronbuild.probe/1"

PROMPTS = ("The", "Once upon a time,", "1, 2, 3, 4,")
"""The fixed requests: short prompts any tokenizer takes, whose greedy continuations depend on
every layer's weights."""

MAX_TOKENS = 8
"""Tokens asked per prompt."""

LOGPROB_TOLERANCE = 0.05
"""Largest difference (nats) between a recorded and an answered logprob of the same token: far
above the float noise of one compiled graph on two hosts, far below what other weights move."""

REQUEST_SECONDS = 120.0
"""How long one completion may take before the server counts as not answering."""


@dataclass(frozen=True)
class Answer:
    """What the server answered one prompt: each generated ``token`` (as text) and its
    ``logprob`` (nats), in order."""

    prompt: str
    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]

    def to_json(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "tokens": list(self.tokens), "logprobs": list(self.logprobs)}


@dataclass(frozen=True)
class ProbeRecord:
    """CI's answers for one ``manifest``: ``answers`` to :data:`PROMPTS` (each
    :data:`MAX_TOKENS` tokens at most) and the ``tolerance`` a node's logprobs are held to."""

    manifest: str
    answers: tuple[Answer, ...]
    max_tokens: int = MAX_TOKENS
    tolerance: float = LOGPROB_TOLERANCE

    def to_bytes(self) -> bytes:
        return canonical_json(
            {
                "schema": PROBE_SCHEMA,
                "manifest": self.manifest,
                "max_tokens": self.max_tokens,
                "logprob_tolerance": self.tolerance,
                "answers": [a.to_json() for a in self.answers],
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes, what: str) -> ProbeRecord:
        """Parse a stored record (canonical bytes only): the answers to :data:`PROMPTS`, each
        once, in order, at most :data:`MAX_TOKENS` tokens each, with a tolerance of at most
        :data:`MAX_TOLERANCE` (a record that asks anything else, or holds anything less, is no
        record CI made).

        Raises:
            StoreDataInvalid: not a probe record of this schema, or malformed.
        """
        raw = parse_canonical(data, what)
        keys = {"schema", "manifest", "max_tokens", "logprob_tolerance", "answers"}
        if not isinstance(raw, dict) or set(raw) != keys or raw["schema"] != PROBE_SCHEMA:
            raise StoreDataInvalid(f"{what}: not a {PROBE_SCHEMA} record")
        max_tokens, tolerance, answers = raw["max_tokens"], raw["logprob_tolerance"], raw["answers"]
        if type(max_tokens) is not int or not 0 < max_tokens <= MAX_TOKENS:
            raise StoreDataInvalid(f"{what}: max_tokens must be 1 to {MAX_TOKENS}")
        if type(tolerance) is not float or not 0 <= tolerance <= MAX_TOLERANCE:
            raise StoreDataInvalid(f"{what}: logprob_tolerance must be 0 to {MAX_TOLERANCE}")
        if not isinstance(answers, list):
            raise StoreDataInvalid(f"{what}: answers must be a list")
        parsed = tuple(_answer(a, max_tokens, what) for a in answers)
        if tuple(a.prompt for a in parsed) != PROMPTS:
            raise StoreDataInvalid(f"{what}: answers must be to the probe's prompts, in order")
        return cls(check_digest(raw["manifest"], what), parsed, max_tokens, tolerance)


MAX_TOLERANCE = 1.0
"""The largest logprob tolerance (nats) a record may carry: beyond it a probe proves little."""


def _answer(data: Any, max_tokens: int, what: str) -> Answer:
    """One recorded answer: its prompt, up to ``max_tokens`` tokens (text) and a finite logprob
    (a number) for each."""
    if not isinstance(data, dict) or set(data) != {"prompt", "tokens", "logprobs"}:
        raise StoreDataInvalid(f"{what}: an answer must have a prompt, tokens and logprobs")
    prompt, tokens, logprobs = data["prompt"], data["tokens"], data["logprobs"]
    if (
        not isinstance(prompt, str)
        or not isinstance(tokens, list)
        or not isinstance(logprobs, list)
        or not all(isinstance(t, str) for t in tokens)
        or not all(type(x) in (int, float) for x in logprobs)
        or len(tokens) != len(logprobs)
        or len(tokens) > max_tokens
    ):
        raise StoreDataInvalid(f"{what}: a malformed answer")
    return Answer(prompt, tuple(tokens), tuple(float(x) for x in logprobs))


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Requests to the node's own server go direct, whatever ``HTTP_PROXY`` a cluster sets."""


def _post(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    request = urllib.request.Request(
        url.rstrip("/") + path,
        None if body is None else json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with _OPENER.open(request, timeout=REQUEST_SECONDS) as response:
            return json.load(response)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise UserError(f"--url {url}: the server did not answer {path} ({reason})") from None


def ask(url: str, prompts: Sequence[str] = PROMPTS, max_tokens: int = MAX_TOKENS) -> list[Answer]:
    """Ask the OpenAI-compatible server at ``url`` (``http://HOST:PORT``) each prompt: greedy
    (temperature 0), ``max_tokens`` tokens, the chosen token's logprob.

    Raises:
        UserError: the server did not answer, or answered without tokens and logprobs.
    """
    models = _post(url, "/v1/models")
    try:
        model = models["data"][0]["id"]
    except (KeyError, IndexError, TypeError):
        raise UserError(f"--url {url}: /v1/models names no model") from None
    answers = []
    for prompt in prompts:
        body = {"model": model, "prompt": prompt, "max_tokens": max_tokens}
        body |= {"temperature": 0, "logprobs": 1}
        reply = _post(url, "/v1/completions", body)
        try:
            found = reply["choices"][0]["logprobs"]
            answer = {"prompt": prompt, "tokens": found["tokens"]}
            answers.append(_answer(answer | {"logprobs": found["token_logprobs"]}, max_tokens, ""))
        except (KeyError, IndexError, TypeError, StoreDataInvalid):
            raise UserError(
                f"--url {url}: a completion came back without its tokens and their logprobs"
            ) from None
    return answers


def differences(record: ProbeRecord, answers: Sequence[Answer]) -> list[str]:
    """How ``answers`` differ from ``record``: one line per prompt whose tokens differ (the first
    token that does) or whose logprob of a token is off by more than the tolerance; empty when
    the probe holds."""
    out = []
    got = {a.prompt: a for a in answers}
    for want in record.answers:
        have = got.get(want.prompt)
        if have is None:
            out.append(f"{want.prompt!r}: not answered")
            continue
        for i, (a, b) in enumerate(zip(want.tokens, have.tokens, strict=False)):
            if a != b:
                out.append(f"{want.prompt!r}: token {i} is {b!r}, CI's was {a!r}")
                break
        else:
            if len(want.tokens) != len(have.tokens):
                out.append(
                    f"{want.prompt!r}: {len(have.tokens)} tokens, CI's answer had "
                    f"{len(want.tokens)}"
                )
                continue
            off = [
                (i, x, y)
                for i, (x, y) in enumerate(zip(want.logprobs, have.logprobs, strict=True))
                if not abs(x - y) <= record.tolerance
            ]
            if off:
                i, x, y = off[0]
                out.append(
                    f"{want.prompt!r}: token {i}'s logprob is {y:.4f}, CI's was {x:.4f} "
                    f"(tolerance {record.tolerance})"
                )
    return out


def compiled_since(
    root: Path, manifest: Manifest, cache_dir: Path, bookkeeping: tuple[str, ...] = ()
) -> list[str]:
    """Files under ``root / cache_dir`` (the engine's compile cache in the layout root) that the
    manifest does not list: what the server compiled since it started, sorted; empty when it
    compiled nothing. A file named in ``bookkeeping`` inside a folder of the manifest's files is
    what the engine writes into an entry it loads (vLLM-Neuron's ``.cache_accessed``), not a
    compile."""
    listed = {f.path for f in manifest.files()}
    entries = {str(PurePosixPath(p).parent) for p in listed}
    folder = root / cache_dir
    if not folder.is_dir():
        return []
    found = (PurePosixPath(p.relative_to(root).as_posix()) for p in folder.rglob("*"))
    return sorted(
        str(rel)
        for rel in found
        if not (root / rel).is_dir()
        and str(rel) not in listed
        and not (rel.name in bookkeeping and str(rel.parent) in entries)
    )
