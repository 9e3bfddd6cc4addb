"""What a store's attestations of one manifest say: who claims to have signed each, whether a
policy's key verifies it, its subject and predicate (``verify``, ``ls``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from neuronbuild.attest.envelope import Attestation, read_attestation
from neuronbuild.attest.keyless import certificate_identity, first_verifying, logged_time
from neuronbuild.attest.policy import Policy
from neuronbuild.attest.statement import binding_problem
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store.records import Manifest


def _keyless_signer(attestation: Attestation, policy: Policy) -> tuple[str, str | None] | None:
    """``(name, void)`` of the policy signer one of whose keyless identities verifies
    ``attestation``'s bundle (``void``: why that identity's ``expires`` voids it,
    :meth:`~.keyless.KeylessIdentity.void_at`, else None), or None."""
    for signer in policy.signers.values():
        identity = first_verifying(attestation.bundle, list(signer.identities))[0]
        if identity is not None:
            return signer.name, identity.void_at(logged_time(attestation.bundle), time.time())
    return None


def describe_attestations(
    digest: str,
    attestations: Iterable[tuple[str, bytes]],
    policy: Policy | None = None,
    bound: tuple[str, Manifest] | None = None,
) -> tuple[list[dict[str, Any]], list[str]]:
    """``(entries, problems)`` for the attestations of manifest ``digest``.

    Each entry: ``keyid`` (the one its name claims), ``identity`` (a keyless attestation's
    certificate identity and issuer, as ``ID (issuer URL)``, unverified; None for a key's),
    ``signer`` (the policy's name of the key
    that verified it, None without one), ``verified`` (whether a key of ``policy`` verified its
    signature and the policy still counts that key, :meth:`~.policy.Policy.unusable`; None
    without a policy: no key to check it with), ``subject``,
    ``predicate_type`` and ``predicate`` (None when unreadable) and ``problem`` (None when
    sound). ``problems``: one line each for an unreadable attestation, one over another
    manifest, or, with ``bound`` (the ref read, ``<name>/<tag>``, and the manifest), one whose
    Statement does not bind that manifest to that ref (:func:`~.statement.binding_problem`:
    another recipe name, a predicate that is not the manifest's), even where another
    attestation satisfies the policy; the caller exits 2.
    """
    keys = [(s.name, k) for s in (policy.signers.values() if policy else ()) for k in s.keys]
    entries, problems = [], []
    for keyid, data in attestations:
        entry: dict[str, Any] = {
            "keyid": keyid,
            "identity": None,
            "signer": None,
            "verified": None,
            "subject": None,
            "predicate_type": None,
            "predicate": None,
            "problem": None,
        }
        entries.append(entry)
        try:
            attestation = read_attestation(data, f"attestation {keyid[:16]} of {digest}")
        except StoreDataInvalid as exc:
            entry["problem"] = str(exc)
            problems.append(str(exc))
            continue
        entry.update(
            subject=attestation.subject,
            predicate_type=attestation.predicate_type,
            predicate=attestation.predicate,
        )
        if attestation.bundle is not None:
            entry["identity"] = "{} (issuer {})".format(*certificate_identity(attestation.bundle))
            if policy is not None:
                signer, void = _keyless_signer(attestation, policy) or (None, None)
                entry["signer"], entry["verified"] = signer, signer is not None and void is None
                if void is not None:  # a good signature the policy no longer counts
                    entry["problem"] = f"signed by {signer}, {void}"
        elif policy is not None:
            by = attestation.verified_by([k for _, k in keys])
            void = policy.unusable(by, time.time()) if by is not None else None
            entry["verified"] = by is not None and void is None
            entry["signer"] = next((n for n, k in keys if k.keyid == by), None)
            if void is not None:  # a good signature the policy no longer counts
                entry["problem"] = f"signed by {entry['signer']} with {void}"
        unbound = None
        if bound is not None:
            unbound = binding_problem(attestation.subject_name, attestation.predicate, *bound)
        if attestation.subject != digest:
            entry["problem"] = (
                f"attestation {keyid[:16]} of {digest} is over another manifest, "
                f"{attestation.subject}"
            )
            problems.append(entry["problem"])
        elif unbound is not None:
            entry["problem"] = f"attestation {keyid[:16]} of {digest}: {unbound}"
            entry["verified"] = False if entry["verified"] is not None else None
            problems.append(entry["problem"])
    return entries, problems
