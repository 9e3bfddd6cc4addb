"""Signing keys for tests, generated with the ``cryptography`` package: a private key file and
its public key beside it (``<name>.pub``), as a CI secret and a node's policy hold them."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from neuronbuild.store.records import Manifest

ANY_MANIFEST = Manifest("a", {"name": "a"}, ())
"""A manifest for a policy refusal that never reaches the binding check (no attestation)."""


def write_key(path: Path, kind: str = "ed25519") -> Path:
    """Write a fresh ``kind`` (``ed25519`` or ``p256``) private key to ``path`` (PEM, PKCS#8)
    and its public key to ``path`` with suffix ``.pub``; returns the public key's path."""
    private = (
        ed25519.Ed25519PrivateKey.generate()
        if kind == "ed25519"
        else ec.generate_private_key(ec.SECP256R1())
    )
    path.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    public = path.with_suffix(".pub")
    public.write_bytes(
        private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return public


def write_policy(
    path: Path,
    signers: dict[str, list[Path]],
    refs: list[tuple[str, list[str]]],
    additions: dict[str, list[str]] | None = None,
) -> Path:
    """Write a trust policy naming ``signers`` (name -> public key files), ``refs`` (pattern,
    signer names), in order, and ``additions`` (kind -> signer names); returns ``path``."""
    lines = ["signers:"]
    for name, keys in signers.items():
        lines.append(f"  {name}:")
        lines.append(f"    keys: [{', '.join(repr(str(k)) for k in keys)}]")
    lines.append("refs:")
    for match, names in refs:
        lines.append(f"  - match: {match!r}")
        lines.append(f"    signers: [{', '.join(names)}]")
    if additions:
        lines.append("additions:")
        lines += [f"  {kind}: [{', '.join(names)}]" for kind, names in additions.items()]
    path.write_text("\n".join(lines) + "\n")
    return path
