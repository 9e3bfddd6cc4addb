"""Issue 22, signers: an AWS KMS key signs (``--sign``/``--key awskms:ARN``), against moto's KMS
on loopback, and a node whose policy names that key's ARN (its public key pinned beside the
policy, fetched once) serves the build offline, with no route to KMS; another key's signature is
refused naming both; a key KMS refuses or cannot reach is one line."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed

from neuronbuild.attest.envelope import read_attestation
from neuronbuild.attest.kms import RAW_MESSAGE_BYTES, kms_signer
from neuronbuild.attest.policy import load_policy
from neuronbuild.errors import StoreError, UserError
from neuronbuild.store.cas import Store
from tests.attest.test_claims_policy import blobs_in, node, serve_node
from tests.lib.commands import neuronbuild_in_process
from tests.lib.s3 import s3_environment, start_moto

__all__ = ["node"]

REGION = "eu-west-1"
OFFLINE = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_MAX_ATTEMPTS": "1"}
"""A node's environment with no KMS: the discard port, where nothing answers."""


@pytest.fixture(scope="module")
def kms() -> Iterator[Any]:
    """A boto3 KMS client of a moto server on loopback, whose endpoint and test credentials are
    set in this process's environment for the module."""
    server, env = start_moto()
    try:
        with s3_environment(env):
            import boto3

            yield boto3.client("kms", region_name=REGION)
    finally:
        server.stop()


def new_key(kms: Any, spec: str = "ECC_NIST_P256", usage: str = "SIGN_VERIFY") -> str:
    return str(kms.create_key(KeySpec=spec, KeyUsage=usage)["KeyMetadata"]["Arn"])


def pin_public_key(kms: Any, arn: str, path: Path) -> Path:
    """What an operator does once: KMS's GetPublicKey (DER), written as the PEM file a policy
    pins (``aws kms get-public-key`` and ``openssl pkey -pubin -inform DER``)."""
    der = kms.get_public_key(KeyId=arn)["PublicKey"]
    public = serialization.load_der_public_key(der)
    path.write_bytes(
        public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


def kms_policy(root: Path, kms: Any, arn: str) -> Path:
    pin_public_key(kms, arn, root / "kms.pub")
    path = root / "kms-policy.yaml"
    path.write_text(
        f"signers:\n  ci:\n    keys: [{{kms: 'awskms:{arn}', file: kms.pub}}]\n"
        "refs: [{match: 'tiny/*', signers: [ci]}]\n"
    )
    return path


def test_a_kms_signed_build_is_served_offline_under_a_policy_naming_its_arn(
    node: dict[str, Path], kms: Any
) -> None:
    arn = new_key(kms)
    code, out, err = neuronbuild_in_process(
        "sign", "tiny/latest", "--key", f"awskms:{arn}", "--cache", str(node["store"]), "--json"
    )
    assert code == 0, err
    policy = kms_policy(node["root"], kms, arn)
    keyid = load_policy(policy).signers["ci"].keys[0].keyid
    assert json.loads(out)["keyid"] == keyid  # KMS's key, by the fingerprint of its public half
    code, _, err, local = serve_node(node, "--policy", str(policy), env=OFFLINE)
    assert code == 0, err
    assert len(blobs_in(local)) == 2


def test_a_signature_by_another_kms_key_is_refused_naming_both(
    node: dict[str, Path], kms: Any
) -> None:
    arn, other = new_key(kms), new_key(kms)
    code, _, err = neuronbuild_in_process(
        "sign", "tiny/latest", "--key", f"awskms:{other}", "--cache", str(node["store"])
    )
    assert code == 0, err
    policy = kms_policy(node["root"], kms, arn)
    code, _, err, local = serve_node(node, "--policy", str(policy), env=OFFLINE)
    assert code == 2 and err.strip().count("\n") == 0, err
    keyid = load_policy(policy).signers["ci"].keys[0].keyid
    assert "not a signer of tiny/latest" in err, err
    assert f"expected a signature by ci (key {keyid[:16]} at {arn})" in err, err
    assert blobs_in(local) == []


def test_seal_signs_with_kms_before_the_ref_moves(node: dict[str, Path], kms: Any) -> None:
    arn = new_key(kms)
    code, out, err = neuronbuild_in_process(
        "seal", str(node["root"] / "recipe.yaml"), "--cache", str(node["store"]),
        "--tag", "signed", "--sign", f"awskms:{arn}", "--json",
    )  # fmt: skip
    assert code == 0, err
    (signed,) = json.loads(out)["signed"]
    store = Store(str(node["store"]))
    (data,) = store.get_attestations(signed["manifest"]).values()
    policy = load_policy(kms_policy(node["root"], kms, arn))
    manifest = store.get_manifest(signed["manifest"])
    assert (
        policy.refusal("tiny/signed", signed["manifest"], [("k", data)], manifest=manifest) is None
    )
    assert read_attestation(data, "a").subject == signed["manifest"]


@pytest.fixture
def kms_with_digest(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """moto's KMS answering Sign with ``MessageType=DIGEST`` as AWS documents it (the message
    is the SHA-256 digest, signed as such), which moto 5.2.5 does not (it signs the digest as a
    message); returns the message types asked, in order."""
    from moto.kms.responses import KmsResponse

    original, seen = KmsResponse.sign, []

    def sign(self: Any) -> str:
        seen.append(self._get_param("MessageType") or "RAW")
        if seen[-1] != "DIGEST":
            return original(self)
        key = self.kms_backend.describe_key(self._get_param("KeyId"))
        digest = self._get_param("Message")  # moto decodes the base64 of blob parameters
        signature = key.private_key.private_key.sign(digest, ec.ECDSA(Prehashed(hashes.SHA256())))
        return json.dumps(
            {
                "KeyId": key.arn,
                "Signature": base64.b64encode(signature).decode(),
                "SigningAlgorithm": self._get_param("SigningAlgorithm"),
            }
        )

    monkeypatch.setattr(KmsResponse, "sign", sign)
    return seen


def test_a_message_over_kmss_raw_limit_is_signed_as_its_digest(
    kms: Any, kms_with_digest: list[str]
) -> None:
    signer = kms_signer(f"awskms:{new_key(kms)}")
    for size in (RAW_MESSAGE_BYTES, RAW_MESSAGE_BYTES + 1):
        payload = b"x" * size
        signer.public_key.verify_signature(signer.sign(payload), payload)  # raises if not
    assert kms_with_digest == ["RAW", "DIGEST"]


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("RSA_2048", "KeySpec RSA_2048, KeyUsage SIGN_VERIFY; give an ECC_NIST_P256 key"),
        ("ECC_NIST_P384", "KeySpec ECC_NIST_P384, KeyUsage SIGN_VERIFY; give"),
        ("ECC_SECG_P256K1", "KeySpec ECC_SECG_P256K1, KeyUsage SIGN_VERIFY; give"),
        ("absent", "KMS refused GetPublicKey (NotFoundException"),
        ("SYMMETRIC_DEFAULT", "KeySpec SYMMETRIC_DEFAULT, KeyUsage ENCRYPT_DECRYPT; give"),
    ],
)
def test_a_kms_key_that_cannot_sign_is_one_line_before_anything_is_sealed(
    node: dict[str, Path], kms: Any, key: str, words: str
) -> None:
    arn = (
        f"arn:aws:kms:{REGION}:123456789012:key/00000000-0000-0000-0000-000000000000"
        if key == "absent"
        else new_key(kms, key, "ENCRYPT_DECRYPT" if key == "SYMMETRIC_DEFAULT" else "SIGN_VERIFY")
    )
    code, _, err = neuronbuild_in_process(
        "seal", str(node["root"] / "recipe.yaml"), "--cache", str(node["store"]),
        "--tag", "never", "--sign", f"awskms:{arn}",
    )  # fmt: skip
    assert code == 2 and words in err and err.count("\n") == 1, err
    assert Store(str(node["store"])).get_ref("tiny", "never") is None


def test_kms_out_of_reach_is_the_networks_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in OFFLINE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    arn = f"arn:aws:kms:{REGION}:123456789012:key/00000000-0000-0000-0000-000000000000"
    with pytest.raises(StoreError, match="KMS unreachable for GetPublicKey") as raised:
        kms_signer(f"awskms:{arn}")
    assert "\n" not in str(raised.value)
    assert not isinstance(raised.value, UserError)
