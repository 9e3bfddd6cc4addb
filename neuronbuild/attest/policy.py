"""A node's trust policy: which signers may sign which refs, and the check that enforces it.

The file (YAML), paths relative to its own folder::

    signers:
      ci:                       # a name of your choosing, used in messages
        keys: [keys/ci.pub]     # PEM public keys (Ed25519 or ECDSA P-256)
      release:
        keys:
          - file: keys/release.pub
            keyid: 3f1c...      # its fingerprint, pinned: the file must hold that key
          - kms: awskms:arn:aws:kms:us-east-1:111122223333:key/1234abcd-...
            file: keys/kms.pub  # the KMS key's public key, fetched once and pinned here
      builds:
        keys:                   # Sigstore keyless: the CI job's OIDC identity, no key to keep
          - identity: https://github.com/org/repo/.github/workflows/build.yml@refs/heads/main
            issuer: https://token.actions.githubusercontent.com
            trusted_root: sigstore/trusted_root.json   # optional: Sigstore's public-good root
      nodes:
        keys: [keys/node.pub]   # the key `neuronbuild capture --key` uses on serving nodes
    refs:                       # first match wins; a pattern is matched over <name>/<tag>
      - match: app/prod
        signers: [release]
        max_age_days: 7         # optional: refuse a build whose newest signature is older
      - match: "*/*"
        signers: [ci, builds]
    additions:                  # optional: who may sign what nodes give back to a build
      precompile-cache: [nodes]
    revoked: [9a0b...]          # optional: keyids whose signatures count for nothing

A rule may also carry ``threshold: N`` (N of its signers, by name, must each have signed), and a
key or keyless entry ``expires: DATE`` (:mod:`.trusted_keys`; a keyless one by Rekor's logged
time, keeping what was signed before).

A key is a PEM public key file, or a mapping of that ``file`` with its fingerprint (``keyid``,
securesystemslib's, :mod:`neuronbuild.attest.keys`) or the AWS KMS key that holds its private
half (``kms: awskms:ARN``). Either way the public key itself is in the policy's folder, never
fetched: a node verifies offline, with no network to KMS or credentials for it. A keyid or an
ARN without its ``file`` is refused (a fingerprint cannot check a signature). A keyless entry
names a certificate identity and OIDC issuer (:mod:`neuronbuild.attest.keyless`), checked
offline against a pinned Sigstore trusted root.

A pattern's ``*`` matches any characters but ``/`` (so ``app/*`` covers every tag of ``app``),
``?`` one character but ``/``, and ``**`` any characters, ``/`` included
(``**`` covers every ref); every other character matches itself (no ``[...]`` classes: a ref
never holds ``[``, so such a pattern is refused, as is one that matches no ref, such as ``*``
or ``app``). A manifest served by digest is matched as
``<recipe name>/sha256:<hex>`` (so ``app/*`` and ``**`` cover it, ``app/prod`` does not). A rule
that can never apply, every ref it matches matched by an earlier rule (``app/prod`` after ``**``),
is refused naming both (:func:`~.ref_patterns.covers`): the narrower rule goes first. Under
a policy, ``serve``, ``pull`` and ``verify`` refuse a ref no rule matches (fail closed); ``tag``
refuses an unsigned move only onto a ref a rule matches (a *protected* name).

``additions`` names, per kind of addition (:mod:`neuronbuild.store.additions`), the signers
whose additions ``serve`` lays out; without it a node under a policy lays out no addition. A
signer named there may not be named by any ``refs`` rule (the policy is refused): a serving
node's key signs what its start wrote, never a build.

The file is read as a regular file of at most :data:`MAX_POLICY_BYTES` (a FIFO is refused, not
waited on) and a key given twice in one mapping is refused, naming it and its lines: YAML would
keep the last silently, so a signer edited in two places would trust what nobody reads.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from securesystemslib.signer import Key

from neuronbuild.attest.additions import verified_by
from neuronbuild.attest.envelope import Attestation, read_attestation
from neuronbuild.attest.files import read_small_file
from neuronbuild.attest.keyless import (
    KeylessIdentity,
    certificate_identity,
    first_verifying,
    logged_time,
)
from neuronbuild.attest.ref_patterns import compile_pattern, covers
from neuronbuild.attest.statement import binding_problem, iso_time, signed_time
from neuronbuild.attest.trusted_keys import KEYID, KEYLESS_FIELDS, TrustedKey, trusted_key
from neuronbuild.digest import short
from neuronbuild.errors import StoreDataInvalid, UserError
from neuronbuild.store.additions import KINDS, Addition
from neuronbuild.store.records import Manifest
from neuronbuild.user_files import DuplicateKeys, load_yaml_unique

MAX_POLICY_BYTES = 1 << 20
"""Largest policy file read (bytes)."""
RULE_FIELDS = frozenset({"match", "signers", "max_age_days", "threshold"})
"""The fields of a ``refs`` entry."""
DAY = 86400.0


class PolicyInvalid(UserError):
    """The policy file is unreadable or malformed: one line naming the field (exit 2)."""


class PolicyRefused(UserError):
    """A manifest the policy does not let through for a ref: one line naming the signer found
    and the one expected (exit 2)."""


@dataclass(frozen=True)
class Signer:
    """One named signer of a policy: the keys that sign as it (``trusted``) and the keyless
    identities that do (``identities``)."""

    name: str
    trusted: tuple[TrustedKey, ...]
    identities: tuple[KeylessIdentity, ...] = ()

    @property
    def keys(self) -> tuple[Key, ...]:
        """The verification keys of :attr:`trusted`."""
        return tuple(t.key for t in self.trusted)

    def key_name(self, keyid: str) -> str:
        """How refusals name this signer's key ``keyid``: ``key <16 hex>[ at <KMS key ARN>]``."""
        named = next((t for t in self.trusted if t.key.keyid == keyid), None)
        return named.name() if named is not None else f"key {keyid[:16]}"

    def describe(self) -> str:
        """``<name> (key <keyid, 16 hex>[ at <ARN>], identity <ID> (issuer <URL>), ...)``: how
        refusals name this signer."""
        named = [t.name() for t in self.trusted] + [i.name() for i in self.identities]
        return f"{self.name} ({', '.join(named)})"


@dataclass(frozen=True)
class Rule:
    """Refs matching ``match`` (a pattern over ``<name>/<tag>``, :mod:`.ref_patterns`, compiled
    as ``pattern``) must be signed by one of ``signers``."""

    match: str
    signers: tuple[Signer, ...]
    pattern: re.Pattern[str]
    max_age_days: float | None = None
    """The oldest a build's newest accepted signature may be (days), or None: no limit."""
    threshold: int = 1
    """How many of ``signers`` (distinct names) must each have signed the build."""

    def covers(self, ref: str) -> bool:
        """Whether ``match`` matches the whole of ``ref``."""
        return self.pattern.fullmatch(ref) is not None


@dataclass(frozen=True)
class Policy:
    """A loaded policy: its ``source`` file, every named signer, its rules in order, and the
    signers of each kind of addition (``additions``)."""

    source: str
    signers: Mapping[str, Signer]
    rules: tuple[Rule, ...]
    additions: Mapping[str, tuple[Signer, ...]] = field(default_factory=dict)
    revoked: frozenset[str] = frozenset()
    """Keyids (64 hex) whose signatures count for nothing, whoever lists the key."""

    def addition_refusal(self, addition: Addition) -> str | None:
        """None when a signer the policy names for ``addition``'s kind signed it; else the
        one-line reason it is not laid out (unsigned, signed by another key, a signature that
        does not verify, or no signer named for that kind)."""
        kind = addition.kind
        head = (
            f"policy {self.source} does not trust addition {short(addition.name)} ({kind}, "
            f"captured on {addition.node.host})"
        )
        signers = self.additions.get(kind, ())
        if not signers:
            return f"{head}: it names no signer of {kind}; add additions: {{{kind}: [SIGNER]}}"
        now = time.time()
        every = [k for s in signers for k in s.keys]
        keys = [k for k in every if self.unusable(k.keyid, now) is None]
        if verified_by(addition, keys) is not None:
            return None
        ours = {k.keyid for k in keys}
        voided = verified_by(addition, every)
        if not addition.keyids:
            found = "it is unsigned"
        elif voided is not None:  # a good signature by a revoked or expired key
            found = f"a signature by {self._signer_of(voided)}, {self.unusable(voided, now)}"
        elif ours & set(addition.keyids):
            found = f"a signature by {self._signer_of(min(ours & set(addition.keyids)))} that "
            found += "does not verify"
        else:
            found = f"a signature by {', '.join(map(self._signer_of, addition.keyids))}"
        expected = " or ".join(s.describe() for s in signers)
        return f"{head}: found {found}; expected a signature by {expected}"

    def rule_for(self, ref: str) -> Rule | None:
        """The first rule whose pattern matches ``ref`` (``<name>/<tag>``), or None."""
        return next((r for r in self.rules if r.covers(ref)), None)

    def _keyless_finding(
        self, attestation: Attestation, ref: str, rule: Rule
    ) -> KeylessIdentity | str:
        """The keyless identity of ``rule`` that verifies ``attestation``'s bundle, else what
        was found, for the refusal."""
        bundle = attestation.bundle
        identities = [i for s in rule.signers for i in s.identities]
        verified, failed = first_verifying(bundle, identities)
        if verified is not None:
            return verified
        who = KeylessIdentity(*certificate_identity(bundle)).name()
        if failed is not None:
            return f"a Sigstore signature by {who} that does not verify ({failed})"
        signer = next(
            (s.name for s in self.signers.values() if any(i.name() == who for i in s.identities)),
            None,
        )
        named = f"signer {signer} ({who})" if signer else who
        return f"a Sigstore signature by {named}, not a signer of {ref}"

    def _signer_of(self, keyid: str) -> str:
        for signer in self.signers.values():
            if any(k.keyid == keyid for k in signer.keys):
                return f"signer {signer.name} ({signer.key_name(keyid)})"
        return f"key {keyid[:16]}"

    def refusal(
        self,
        ref: str,
        digest: str,
        attestations: Iterable[tuple[str, bytes]],
        *,
        manifest: Manifest,
        required: bool = True,
        now: float | None = None,
    ) -> str | None:
        """:meth:`judge`'s refusal line, or None."""
        return self.judge(ref, digest, attestations, manifest=manifest, required=required, now=now)[
            0
        ]

    def judge(
        self,
        ref: str,
        digest: str,
        attestations: Iterable[tuple[str, bytes]],
        *,
        manifest: Manifest,
        required: bool = True,
        now: float | None = None,
    ) -> tuple[str | None, float | None]:
        """``(None, signed)`` when one of ``attestations`` (``(keyid their name claims, bytes)``
        pairs, as :meth:`~neuronbuild.store.cas.Store.get_attestations` reads them) is a signature
        by a signer the first rule matching ``ref`` names, over manifest ``digest`` (read as
        ``manifest``), whose Statement binds it to ``ref``'s name and describes that manifest
        (:func:`~neuronbuild.attest.statement.binding_problem`); else the one-line refusal, naming
        what was found and who was expected, and None. ``signed``: when the newest such signature
        was made (seconds since the epoch: Rekor's integrated time for a keyless one,
        :func:`~.keyless.logged_time`, else :func:`~.statement.signed_time`; None where none is
        stated, or no rule matches). A rule's ``threshold`` needs that many of its signers.
        ``required``: a ref no rule matches is refused (False: ``tag``'s check, where such a ref is
        not protected). A rule's ``max_age_days`` refuses a build whose newest accepted signature is
        older than that at ``now`` (this host's clock, default now): a node that only sees a frozen
        view of the store stops serving it (TUF's freeze attack), offline too.

        Never raises on hostile attestations: each is described in the refusal.
        """
        rule = self.rule_for(ref)
        head = f"policy {self.source} refuses {ref} ({short(digest)})"
        if rule is None:
            if not required:
                return None, None
            line = f"{head}: no rule names its signers; add a refs entry whose match covers {ref}"
            return line, None
        now = time.time() if now is None else now
        expected = " or ".join(s.describe() for s in rule.signers)
        if rule.threshold > 1:
            listed = ", ".join(s.describe() for s in rule.signers)
            expected = f"each of {rule.threshold} of its signers: {listed}"
        keys = [k for s in rule.signers for k in s.keys]
        usable = [k for k in keys if self.unusable(k.keyid, now) is None]
        found: list[str] = []
        accepted: list[tuple[str, float | None]] = []  # (signer name, when signed)
        for keyid, data in attestations:
            try:
                attestation = read_attestation(data, f"attestation {keyid[:16]}")
            except StoreDataInvalid as exc:
                found.append(f"an unreadable attestation ({exc})")
                continue
            if attestation.bundle is not None:
                finding = self._keyless_finding(attestation, ref, rule)
                if isinstance(finding, str):
                    found.append(finding)
                elif attestation.subject != digest:
                    found.append(
                        f"a Sigstore attestation by {certificate_identity(attestation.bundle)[0]}"
                        f" over another manifest, {short(attestation.subject)}"
                    )
                elif binding := self._unbound(attestation, ref, manifest):
                    who = certificate_identity(attestation.bundle)[0]
                    found.append(f"a Sigstore attestation by {who} {binding}")
                else:
                    logged = logged_time(attestation.bundle)  # Rekor's: a trusted time
                    if void := finding.void_at(logged, now):
                        found.append(f"a Sigstore signature by {finding.name()}, {void}")
                        continue
                    for signer in rule.signers:
                        if finding in signer.identities:
                            accepted.append((signer.name, logged))
                continue
            # Usable keys first: an envelope signed by an expired key and its successor counts.
            by = attestation.verified_by(usable) or attestation.verified_by(keys)
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
            elif binding := self._unbound(attestation, ref, manifest):
                found.append(f"a signature by {self._signer_of(by)} {binding}")
            elif unusable := self.unusable(by, now):
                found.append(f"a signature by {self._signer_of(by)}, {unusable}")
            else:
                for signer in rule.signers:
                    if any(k.keyid == by for k in signer.keys):
                        accepted.append((signer.name, signed_time(attestation.predicate)))
        names = sorted({name for name, _ in accepted})
        if len(names) >= rule.threshold:
            times = [t for _, t in accepted if t is not None]
            signed = max(times) if times else None
            return self._stale(rule, head, signed, now), signed
        if accepted:
            found.insert(0, f"signatures by {len(names)} of its signers ({', '.join(names)})")
        if not found:
            return f"{head}: found no attestation; expected a signature by {expected}", None
        return f"{head}: found {'; '.join(found)}; expected a signature by {expected}", None

    def unusable(self, keyid: str, now: float) -> str | None:
        """Why key ``keyid``'s valid signature counts for nothing at ``now``: the policy revokes
        it, or it expired (its ``expires`` date); None where it counts. A key's signatures
        carry only the signer's own time, so a revoked key's count for nothing, whenever they
        claim to have been made."""
        if keyid in self.revoked:
            return "a key this policy revokes (revoked)"
        for signer in self.signers.values():
            for trusted in signer.trusted:
                expires = trusted.expires
                if trusted.key.keyid == keyid and expires is not None and now >= expires:
                    return f"a key that expired {iso_time(expires)} (expires)"
        return None

    def _stale(self, rule: Rule, head: str, signed: float | None, now: float) -> str | None:
        """The refusal of a build whose newest accepted signature is older than ``rule``'s
        ``max_age_days`` at ``now``, else None."""
        if rule.max_age_days is None:
            return None
        if signed is None:
            age = "states no time"
        elif now - signed > rule.max_age_days * DAY:
            age = f"was made {(now - signed) / DAY:.1f} days ago ({iso_time(signed)})"
        else:
            return None
        return (
            f"{head}: its newest accepted signature {age}, and refs[{self.rules.index(rule)}] "
            f"({rule.match!r}) allows {rule.max_age_days:g} days (max_age_days); sign it again "
            "(neuronbuild sign), or read a store that holds its newest signature"
        )

    @staticmethod
    def _unbound(attestation: Attestation, ref: str, manifest: Manifest) -> str | None:
        return binding_problem(attestation.subject_name, attestation.predicate, ref, manifest)

    def enforce(
        self,
        ref: str,
        digest: str,
        attestations: Iterable[tuple[str, bytes]],
        *,
        manifest: Manifest,
        required: bool = True,
    ) -> float | None:
        """:meth:`judge`, its refusal raised; else when the newest accepted signature was made.

        Raises:
            PolicyRefused: the refusal line (exit 2).
        """
        line, signed = self.judge(ref, digest, attestations, manifest=manifest, required=required)
        if line is not None:
            raise PolicyRefused(line)
        return signed


def _list(value: Any, where: str, what: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise PolicyInvalid(f"{where}: expected a non-empty list of {what}")
    return value


def _signer(name: str, entry: Any, folder: Path, field: str) -> Signer:
    if isinstance(entry, dict) and KEYLESS_FIELDS & set(entry):
        raise PolicyInvalid(
            f"{field}: a keyless signer is an entry of keys: "
            "{keys: [{identity: ID, issuer: URL}]}"
        )
    if not isinstance(entry, dict) or set(entry) != {"keys"}:
        raise PolicyInvalid(f"{field}: expected exactly {{keys: [KEY, ...]}}")
    trusted: list[TrustedKey] = []
    identities: list[KeylessIdentity] = []
    for i, key in enumerate(_list(entry["keys"], f"{field}.keys", "keys")):
        try:
            found = trusted_key(key, folder, f"{field}.keys[{i}]")
        except UserError as exc:
            raise PolicyInvalid(str(exc)) from None
        if isinstance(found, KeylessIdentity):
            identities.append(found)
        else:
            trusted.append(found)
    return Signer(name, tuple(trusted), tuple(identities))


def _check_listed_once(signers: Mapping[str, Signer], where: str) -> None:
    """Refuse a key, or a keyless identity under one trusted root, listed twice in the policy:
    within one signer it means less than it seems (two entries, one key), across signers it
    makes the two one (a node's key that also signs builds, :func:`_additions`). One identity
    under two roots (a root being rotated) is two entries.

    Raises:
        PolicyInvalid: naming the signers and the key or identity.
    """
    seen: dict[str, str] = {}
    for name, signer in signers.items():
        listed = [f"key {str(t.key.keyid)[:16]}" for t in signer.trusted]
        listed += [
            i.name() + (f" under {i.root.name}" if i.root else "") for i in signer.identities
        ]
        for what in listed:
            if what in seen:
                also = "twice" if seen[what] == name else f"as signers.{seen[what]} does"
                raise PolicyInvalid(
                    f"{where}: signers.{name} lists {what} {also}; list each key once"
                )
            seen[what] = name


def parse_policy(data: Any, source: str, folder: Path) -> Policy:
    """A :class:`Policy` from the YAML value ``data`` of file ``source`` (key paths relative to
    ``folder``).

    Raises:
        PolicyInvalid: the first problem, naming its field (``signers.ci.keys[0]``, ...).
    """
    where = f"policy {source}"
    if not isinstance(data, dict) or not {"signers", "refs"} <= set(data) <= {
        "signers",
        "refs",
        "additions",
        "revoked",
    }:
        raise PolicyInvalid(
            f"{where}: expected the fields signers and refs, and at most additions and revoked "
            "besides"
        )
    raw_signers = data["signers"]
    if not isinstance(raw_signers, dict) or not raw_signers:
        raise PolicyInvalid(f"{where}: signers: expected a mapping of names to {{keys: [...]}}")
    signers = {
        str(name): _signer(str(name), entry, folder, f"{where}: signers.{name}")
        for name, entry in raw_signers.items()
    }
    _check_listed_once(signers, where)
    rules: list[Rule] = []
    for i, entry in enumerate(_list(data["refs"], f"{where}: refs", "{match, signers}")):
        field = f"{where}: refs[{i}]"
        if not isinstance(entry, dict) or not {"match", "signers"} <= set(entry) <= RULE_FIELDS:
            raise PolicyInvalid(
                f"{field}: expected {{match: PATTERN, signers: [NAME]}}, and at most "
                "max_age_days and threshold besides"
            )
        max_age = entry.get("max_age_days")
        if max_age is not None and (
            isinstance(max_age, bool) or not isinstance(max_age, int | float) or not max_age > 0
        ):
            raise PolicyInvalid(f"{field}.max_age_days: expected a number of days above 0")
        if not isinstance(entry["match"], str):
            raise PolicyInvalid(f"{field}.match: expected a pattern over <name>/<tag>")
        try:
            pattern = compile_pattern(entry["match"], f"{field}.match")
        except UserError as exc:
            raise PolicyInvalid(str(exc)) from None
        named = []
        for name in _list(entry["signers"], f"{field}.signers", "signer names"):
            if str(name) not in signers:
                known = ", ".join(sorted(signers))
                raise PolicyInvalid(f"{field}.signers: {name!r} is not a signer (known: {known})")
            named.append(signers[str(name)])
        for j, earlier in enumerate(rules):
            if covers(earlier.match, entry["match"]):
                raise PolicyInvalid(
                    f"{field}.match: {entry['match']!r} can never apply: refs[{j}] "
                    f"({earlier.match!r}) comes first and matches every ref it does (the first "
                    "match wins); put the narrower rule first"
                )
        threshold = entry.get("threshold", 1)
        if isinstance(threshold, bool) or not isinstance(threshold, int):
            raise PolicyInvalid(f"{field}.threshold: expected a whole number of signers")
        if not 1 <= threshold <= len({s.name for s in named}):
            raise PolicyInvalid(
                f"{field}.threshold: {threshold} of {len({s.name for s in named})} signers can "
                "never be met; name that many signers or lower it"
            )
        rules.append(Rule(entry["match"], tuple(named), pattern, max_age, threshold))
    additions = _additions(data.get("additions"), signers, rules, where)
    revoked = data.get("revoked", [])
    if not isinstance(revoked, list) or not all(
        isinstance(k, str) and KEYID.fullmatch(k) for k in revoked
    ):
        raise PolicyInvalid(
            f"{where}: revoked: expected a list of keyids (64 lowercase hex, as sign --json "
            "prints them)"
        )
    return Policy(source, signers, tuple(rules), additions, frozenset(revoked))


def _additions(
    data: Any, signers: Mapping[str, Signer], rules: list[Rule], where: str
) -> dict[str, tuple[Signer, ...]]:
    """The ``additions`` entry: kind -> signers.

    Raises:
        PolicyInvalid: not a mapping of known kinds to signer names, an unknown signer, or a
            signer a ``refs`` rule also names.
    """
    if data is None:
        return {}
    if not isinstance(data, dict) or not data:
        raise PolicyInvalid(f"{where}: additions: expected a mapping of kinds to signer names")
    out = {}
    for kind, names in data.items():
        field_ = f"{where}: additions.{kind}"
        if kind not in KINDS:
            raise PolicyInvalid(f"{field_}: not a kind of addition (known: {', '.join(KINDS)})")
        named = []
        for name in _list(names, field_, "signer names"):
            signer = signers.get(str(name))
            if signer is None:
                known = ", ".join(sorted(signers))
                raise PolicyInvalid(f"{field_}: {name!r} is not a signer (known: {known})")
            if not signer.keys:
                raise PolicyInvalid(
                    f"{field_}: {name} has only keyless identities; an addition is signed with "
                    "a key (neuronbuild capture --key): give it keys"
                )
            if any(signer.name == s.name for rule in rules for s in rule.signers):
                raise PolicyInvalid(
                    f"{field_}: {name} also signs builds (a refs rule names it); a node's key "
                    "signs additions only: give it a signer of its own"
                )
            named.append(signer)
        out[str(kind)] = tuple(named)
    return out


def _yaml(text: bytes, where: str) -> Any:
    """The YAML document ``text``; a key a mapping holds twice is refused, naming it and its
    lines (:func:`neuronbuild.user_files.load_yaml_unique`, as a recipe's).

    Raises:
        PolicyInvalid: not YAML (its line), or a duplicate key.
    """
    try:
        return load_yaml_unique(text)
    except DuplicateKeys as exc:
        raise PolicyInvalid(f"{where}: {exc.errors[0]}") from None
    except (yaml.YAMLError, RecursionError) as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise PolicyInvalid(f"{where}: not YAML{at}; fix the file") from None


def load_policy(path: str | Path, what: str = "--policy") -> Policy:
    """The policy in YAML file ``path``, named ``what`` in messages (the option, or
    ``$NEURONBUILD_POLICY`` when the environment gave it).

    Raises:
        PolicyInvalid: unreadable, not a regular file (a FIFO is refused, not waited on), over
            :data:`MAX_POLICY_BYTES`, not YAML, a key given twice in one mapping, or malformed.
    """
    path = Path(path)
    try:
        text = read_small_file(path, MAX_POLICY_BYTES, what, "a policy file (YAML)")
    except UserError as exc:
        raise PolicyInvalid(str(exc)) from None
    return parse_policy(_yaml(text, f"{what} {path}"), str(path), path.parent)
