"""Issue 22, part 6: hostile attestations are refused like any other bad store object: exit 2,
one line, no hang, never a traceback; and no change to a signed envelope's bytes makes a policy
accept anything but the very payload and signature CI wrote (a property)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from neuronbuild.attest.envelope import read_attestation
from neuronbuild.attest.policy import load_policy
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.store.cas import Store
from neuronbuild.store.layout import MAX_ATTESTATION_BYTES
from tests.attest.test_claims_policy import blobs_in, node, serve_node, sign
from tests.lib.commands import neuronbuild_in_process
from tests.lib.properties import examples

__all__ = ["node"]  # the fixture, shared


def signed_path(node: dict[str, Path]) -> tuple[Store, str, Path]:
    """CI signs tiny/latest; (store, manifest digest, the attestation's file)."""
    sign(node, node["key"])
    store = Store(str(node["store"]))
    digest = store.get_ref("tiny", "latest")
    assert digest is not None
    (path,) = store.attestation_paths(digest).values()
    return store, digest, Path(path)


def rewrite(change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(path: Path) -> None:
        envelope = json.loads(path.read_text())
        change(envelope)
        path.write_text(json.dumps(envelope))

    return apply


def _payload_type(envelope: dict) -> None:
    envelope["payloadType"] = "application/vnd.dsse.other+json"


def _not_a_statement(envelope: dict) -> None:
    envelope["payload"] = base64.b64encode(b'{"_type": "https://example.com/Other"}').decode()


def _bad_base64(envelope: dict) -> None:
    envelope["signatures"][0]["sig"] = "!!not base64!!"


def _keyid_with_escapes(envelope: dict) -> None:
    envelope["signatures"][0]["keyid"] = "\nerror: none\x1b[2K"  # a forged line, a terminal escape


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _symlink(path: Path) -> None:
    elsewhere = path.parent.parent.parent / "elsewhere.json"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)  # a valid attestation, reached through a link


HOSTILE: dict[str, tuple[Callable[[Path], None], str]] = {
    "wrong payload type": (rewrite(_payload_type), "payload type 'application/vnd.dsse.other"),
    "payload no statement": (rewrite(_not_a_statement), "not an in-toto Statement v1"),
    "bad base64": (rewrite(_bad_base64), "not a DSSE envelope"),
    "a keyid with escapes": (rewrite(_keyid_with_escapes), "a keyid that is not"),
    "malformed json": (lambda p: p.write_text('{"payload": '), "malformed JSON"),
    "duplicate keys": (
        lambda p: p.write_text(p.read_text()[:-1] + ', "payload": "e30="}'),
        "a key appears twice",
    ),
    "huge": (lambda p: p.write_bytes(b" " * (MAX_ATTESTATION_BYTES + 1)), "larger than"),
    "deeply nested": (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "malformed JSON"),
    "nested past the cap": (lambda p: p.write_text("[" * 40 + "]" * 40), "nested deeper than 32"),
    "a fifo": (_fifo, "not a regular file"),
    "a symlink": (_symlink, "a symbolic link"),
    "not an object": (lambda p: p.write_text("[]"), "not a DSSE envelope"),
}


@pytest.mark.parametrize("how", sorted(HOSTILE))
@pytest.mark.slow
def test_a_hostile_attestation_is_refused_by_serve_in_one_line_without_a_blob(
    node: dict[str, Path], how: str
) -> None:
    _, _, path = signed_path(node)
    HOSTILE[how][0](path)
    try:
        code, out, err, local = serve_node(node, "--policy", str(node["policy"]))
    except subprocess.TimeoutExpired:
        pytest.fail(f"serve hung on {how}")
    assert code == 2, (out, err)
    assert HOSTILE[how][1] in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert blobs_in(local) == []


@pytest.mark.parametrize("how", sorted(HOSTILE))
def test_a_hostile_attestation_fails_verify_with_exit_2(node: dict[str, Path], how: str) -> None:
    _, _, path = signed_path(node)
    HOSTILE[how][0](path)
    code, _, err = neuronbuild_in_process("verify", "tiny/latest", "--cache", str(node["store"]))
    assert code == 2, err
    assert HOSTILE[how][1] in err and "Traceback" not in err, err


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_no_change_to_a_signed_envelope_passes_unless_it_decodes_to_what_ci_signed(
    node: dict[str, Path], data: st.DataObject
) -> None:
    store = Store(str(node["store"]))
    digest = store.get_ref("tiny", "latest")
    assert digest is not None
    if not store.get_attestations(digest):
        sign(node, node["key"])
    (original,) = store.get_attestations(digest).values()
    policy = load_policy(node["policy"])
    manifest = store.get_manifest(digest)
    assert policy.refusal("tiny/latest", digest, [("k", original)], manifest=manifest) is None
    at = data.draw(st.integers(0, len(original) - 1))
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != original[at]))
    mutated = original[:at] + bytes([byte]) + original[at + 1 :]
    refusal = policy.refusal("tiny/latest", digest, [("k", mutated)], manifest=manifest)
    if refusal is None:  # base64 ignores a last character's unused bits: the same bytes
        theirs, ours = read_attestation(mutated, "m"), read_attestation(original, "o")
        assert theirs.envelope == ours.envelope
    else:
        assert "\n" not in refusal


def test_a_huge_attestation_is_refused_before_it_is_read_whole(node: dict[str, Path]) -> None:
    store, digest, path = signed_path(node)
    path.write_bytes(b"{" * (MAX_ATTESTATION_BYTES * 4))
    with pytest.raises(StoreDataInvalid, match="larger than"):
        store.get_attestations(digest)


def test_a_strangers_signature_that_claims_cis_keyid_is_refused(node: dict[str, Path]) -> None:
    store, digest, path = signed_path(node)  # CI's, for its keyid
    ci_keyid = path.stem
    path.unlink()
    sign(node, node["root"] / "stranger.key")
    (theirs,) = store.attestation_paths(digest).values()
    envelope = json.loads(Path(theirs).read_text())
    envelope["signatures"][0]["keyid"] = ci_keyid  # the name and the claim both say CI
    Path(theirs).unlink()
    path.write_text(json.dumps(envelope))
    code, _, err, local = serve_node(node, "--policy", str(node["policy"]))
    assert code == 2 and "signer ci (key " in err and "that does not verify" in err, err
    assert blobs_in(local) == []


def test_verify_prints_an_unverified_builder_id_as_one_safe_line() -> None:
    from neuronbuild.cli.store import attestation_line

    evil = "evil\n\x1b[32mOK\ud800"
    entry = {"keyid": "a" * 64, "identity": None, "signer": None, "verified": None}
    line = attestation_line({**entry, "predicate": {"runDetails": {"builder": {"id": evil}}}})
    assert line.isprintable() and line.isascii(), line
    assert line.endswith(ascii(evil))
