"""A node's trust policy: which signers may sign which refs, and the check that enforces it.

The file (YAML), paths relative to its own folder::

    signers:
      ci:                       # a name of your choosing, used in messages
        keys: [keys/ci.pub]     # PEM public keys (Ed25519 or ECDSA P-256)
    refs:                       # first match wins; a pattern is fnmatch over <name>/<tag>
      - match: app/prod
        signers: [ci]
      - match: "*"
        signers: [ci]

A manifest served by digest is matched as ``<recipe name>/sha256:<hex>`` (so ``app/*`` and ``*``
cover it, ``app/prod`` does not). Under a policy, ``serve``, ``pull`` and ``verify`` refuse a ref
no rule matches (fail closed); ``tag`` refuses an unsigned move only onto a ref a rule matches
(a *protected* name).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from securesystemslib.signer import Key

from neuronbuild.attest.envelope import read_attestation
from neuronbuild.attest.keys import load_public_key
from neuronbuild.digest import short
from neuronbuild.errors import StoreDataInvalid, UserError

MAX_POLICY_BYTES = 1 << 20
"""Largest policy file read (bytes)."""


class PolicyInvalid(UserError):
    """The policy file is unreadable or malformed: one line naming the field (exit 2)."""


class PolicyRefused(UserError):
    """A manifest the policy does not let through for a ref: one line naming the signer found
    and the one expected (exit 2)."""


@dataclass(frozen=True)
class Signer:
    """One named signer of a policy and the public keys that sign as it."""

    name: str
    keys: tuple[Key, ...]

    def describe(self) -> str:
        """``<name> (key <keyid, 16 hex>[, ...])``: how refusals name this signer."""
        return f"{self.name} (key {', '.join(str(k.keyid)[:16] for k in self.keys)})"


@dataclass(frozen=True)
class Rule:
    """Refs matching ``match`` (fnmatch over ``<name>/<tag>``) must be signed by one of
    ``signers``."""

    match: str
    signers: tuple[Signer, ...]


@dataclass(frozen=True)
class Policy:
    """A loaded policy: its ``source`` file, every named signer, and its rules in order."""

    source: str
    signers: Mapping[str, Signer]
    rules: tuple[Rule, ...]

    def rule_for(self, ref: str) -> Rule | None:
        """The first rule whose pattern matches ``ref`` (``<name>/<tag>``), or None."""
        return next((r for r in self.rules if fnmatch.fnmatchcase(ref, r.match)), None)

    def _signer_of(self, keyid: str) -> str:
        for signer in self.signers.values():
            if any(k.keyid == keyid for k in signer.keys):
                return f"signer {signer.name} (key {keyid[:16]})"
        return f"key {keyid[:16]}"

    def refusal(
        self,
        ref: str,
        digest: str,
        attestations: Iterable[tuple[str, bytes]],
        *,
        required: bool = True,
    ) -> str | None:
        """None when one of ``attestations`` (``(keyid their name claims, bytes)`` pairs, as
        :meth:`~neuronbuild.store.cas.Store.get_attestations` reads them) is a signature by a
        signer the first rule matching ``ref`` names, over manifest ``digest``; else the one-line
        refusal, naming what was found and who was expected. ``required``: a ref no rule matches
        is refused (False: ``tag``'s check, where such a ref is not protected).

        Never raises on hostile attestations: each is described in the refusal.
        """
        rule = self.rule_for(ref)
        head = f"policy {self.source} refuses {ref} ({short(digest)})"
        if rule is None:
            if not required:
                return None
            return f"{head}: no rule names its signers; add a refs entry whose match covers {ref}"
        expected = " or ".join(s.describe() for s in rule.signers)
        keys = [k for s in rule.signers for k in s.keys]
        found = []
        for keyid, data in attestations:
            try:
                attestation = read_attestation(data, f"attestation {keyid[:16]}")
            except StoreDataInvalid as exc:
                found.append(f"an unreadable attestation ({exc})")
                continue
            by = attestation.verified_by(keys)
            if by is None:
                claimed = [k for k in attestation.keyids if any(k == key.keyid for key in keys)]
                if claimed:
                    found.append(
                        f"a signature by {self._signer_of(claimed[0])} that does not verify"
                    )
                else:
                    signers = ", ".join(self._signer_of(k) for k in attestation.keyids)
                    found.append(f"a signature by {signers}, not a signer of {ref}")
            elif attestation.subject != digest:
                found.append(
                    f"an attestation by {self._signer_of(by)} over another manifest, "
                    f"{short(attestation.subject)}"
                )
            else:
                return None
        if not found:
            return f"{head}: found no attestation; expected a signature by {expected}"
        return f"{head}: found {'; '.join(found)}; expected a signature by {expected}"

    def enforce(
        self,
        ref: str,
        digest: str,
        attestations: Iterable[tuple[str, bytes]],
        *,
        required: bool = True,
    ) -> None:
        """:meth:`refusal`, raised.

        Raises:
            PolicyRefused: the refusal line (exit 2).
        """
        line = self.refusal(ref, digest, attestations, required=required)
        if line is not None:
            raise PolicyRefused(line)


def _list(value: Any, where: str, what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise PolicyInvalid(f"{where}: expected a non-empty list of {what}")
    return value


def parse_policy(data: Any, source: str, folder: Path) -> Policy:
    """A :class:`Policy` from the YAML value ``data`` of file ``source`` (key paths relative to
    ``folder``).

    Raises:
        PolicyInvalid: the first problem, naming its field (``signers.ci.keys[0]``, ...).
    """
    where = f"policy {source}"
    if not isinstance(data, dict) or set(data) != {"signers", "refs"}:
        raise PolicyInvalid(f"{where}: expected exactly the fields signers and refs")
    raw_signers = data["signers"]
    if not isinstance(raw_signers, dict) or not raw_signers:
        raise PolicyInvalid(f"{where}: signers: expected a mapping of names to {{keys: [...]}}")
    signers: dict[str, Signer] = {}
    for name, entry in raw_signers.items():
        field = f"{where}: signers.{name}"
        if not isinstance(entry, dict) or set(entry) != {"keys"}:
            raise PolicyInvalid(f"{field}: expected exactly {{keys: [PEM public key files]}}")
        keys = []
        for i, path in enumerate(_list(entry["keys"], f"{field}.keys", "PEM public key files")):
            if not isinstance(path, str):
                raise PolicyInvalid(f"{field}.keys[{i}]: expected a file path")
            try:
                keys.append(load_public_key(folder / path, f"{field}.keys[{i}]"))
            except UserError as exc:
                raise PolicyInvalid(str(exc)) from None
        signers[str(name)] = Signer(str(name), tuple(keys))
    rules = []
    for i, entry in enumerate(_list(data["refs"], f"{where}: refs", "{match, signers}")):
        field = f"{where}: refs[{i}]"
        if not isinstance(entry, dict) or set(entry) != {"match", "signers"}:
            raise PolicyInvalid(f"{field}: expected exactly {{match: PATTERN, signers: [NAME]}}")
        if not isinstance(entry["match"], str) or not entry["match"]:
            raise PolicyInvalid(f"{field}.match: expected a pattern over <name>/<tag>")
        named = []
        for name in _list(entry["signers"], f"{field}.signers", "signer names"):
            if str(name) not in signers:
                known = ", ".join(sorted(signers))
                raise PolicyInvalid(f"{field}.signers: {name!r} is not a signer (known: {known})")
            named.append(signers[str(name)])
        rules.append(Rule(entry["match"], tuple(named)))
    return Policy(source, signers, tuple(rules))


def load_policy(path: str | Path) -> Policy:
    """The policy in YAML file ``path``.

    Raises:
        PolicyInvalid: unreadable, over :data:`MAX_POLICY_BYTES`, not YAML, or malformed.
    """
    path = Path(path)
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_POLICY_BYTES + 1)
    except OSError as exc:
        raise PolicyInvalid(f"--policy {path}: cannot read it ({exc.strerror or exc})") from None
    if len(text) > MAX_POLICY_BYTES:
        raise PolicyInvalid(f"--policy {path}: larger than {MAX_POLICY_BYTES} bytes")
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise PolicyInvalid(f"--policy {path}: not YAML{at}; fix the file") from None
    return parse_policy(data, str(path), path.parent)
