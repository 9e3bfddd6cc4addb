"""The attestation's format: an in-toto Statement v1 over the manifest with a SLSA v1 provenance
predicate, in a DSSE envelope that in-toto's own verifier accepts; the builder read from each CI
system's variables; keys and policies refused with one line naming the field."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from neuronbuild.attest.builder import LOCAL_BUILDER, builder_from_env
from neuronbuild.attest.envelope import PAYLOAD_TYPE, read_attestation, sign_statement
from neuronbuild.attest.keys import load_public_key, load_signer
from neuronbuild.attest.policy import PolicyInvalid, load_policy
from neuronbuild.attest.statement import PREDICATE_TYPE, STATEMENT_TYPE, statement
from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.errors import UserError
from neuronbuild.store.cas import Store
from tests.conftest import cpu_recipe, publish_build
from tests.lib.keys import ANY_MANIFEST, write_key, write_policy


@pytest.fixture
def sealed(tmp_path: Path) -> tuple[Store, str]:
    store = Store(str(tmp_path / "store"), create=True)
    return store, publish_build(store, cpu_recipe(), tmp_path, "a")


def test_the_statement_names_the_manifest_and_its_recipe_toolchain_and_unit_keys(
    sealed: tuple[Store, str],
) -> None:
    store, digest = sealed
    manifest = store.get_manifest(digest)
    github = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "org/models",
        "GITHUB_RUN_ID": "42",
        "GITHUB_WORKFLOW_REF": "org/models/.github/workflows/build.yml@refs/heads/main",
    }
    got = statement(manifest, digest, builder_from_env(github))
    assert got["_type"] == STATEMENT_TYPE and got["predicateType"] == PREDICATE_TYPE
    assert got["subject"] == [
        {"name": "tiny", "digest": {"sha256": digest.removeprefix("sha256:")}}
    ]
    build = got["predicate"]["buildDefinition"]
    assert build["externalParameters"]["recipe"] == manifest.recipe
    assert build["externalParameters"]["recipeDigest"] == sha256_digest(
        canonical_json(manifest.recipe)
    )
    assert build["internalParameters"]["units"] == [u.key for u in manifest.units]
    assert build["internalParameters"]["toolchain"] == manifest.units[0].toolchain
    run = got["predicate"]["runDetails"]
    assert run["builder"]["id"] == (
        "https://github.com/org/models/.github/workflows/build.yml@refs/heads/main"
    )
    assert (
        run["metadata"]["invocationId"]
        == "https://github.com/org/models/actions/runs/42/attempts/1"
    )


@pytest.mark.parametrize(
    ("env", "system", "ident", "run"),
    [
        (
            {
                "GITLAB_CI": "true",
                "CI_PROJECT_URL": "https://gitlab.com/o/p",
                "CI_JOB_URL": "https://gitlab.com/o/p/-/jobs/7",
            },
            "gitlab",
            "https://gitlab.com/o/p",
            "https://gitlab.com/o/p/-/jobs/7",
        ),
        (
            {
                "BUILDKITE": "true",
                "BUILDKITE_ORGANIZATION_SLUG": "o",
                "BUILDKITE_PIPELINE_SLUG": "p",
                "BUILDKITE_BUILD_URL": "https://buildkite.com/o/p/builds/3",
                "BUILDKITE_JOB_ID": "j",
            },
            "buildkite",
            "https://buildkite.com/o/p",
            "https://buildkite.com/o/p/builds/3#j",
        ),
        (
            {"CODEBUILD_BUILD_ARN": "arn:aws:codebuild:us-east-1:123:build/proj:abc"},
            "codebuild",
            "arn:aws:codebuild:us-east-1:123:project/proj",
            "arn:aws:codebuild:us-east-1:123:build/proj:abc",
        ),
        ({}, "local", LOCAL_BUILDER, None),
    ],
)
def test_the_builder_is_read_from_each_ci_systems_variables(
    env: dict[str, str], system: str, ident: str, run: str | None
) -> None:
    builder = builder_from_env(env)
    assert (builder.system, builder.id, builder.run) == (system, ident, run)


def test_an_attestation_verifies_with_in_totos_own_verifier(
    sealed: tuple[Store, str], tmp_path: Path
) -> None:
    from in_toto.models.metadata import Envelope as InTotoEnvelope
    from in_toto.models.metadata import Metadata

    store, digest = sealed
    public = write_key(tmp_path / "ci.key", "p256")
    signer = load_signer(str(tmp_path / "ci.key"))
    data = sign_statement(
        statement(store.get_manifest(digest), digest, builder_from_env({})), signer
    )
    envelope = Metadata.from_dict(json.loads(data))
    assert isinstance(envelope, InTotoEnvelope) and envelope.payload_type == PAYLOAD_TYPE
    key = load_public_key(public, "key")
    envelope.verify_signature(key.to_dict() | {"keyid": key.keyid})  # raises if it does not verify
    tampered = json.loads(data)
    tampered["payload"] = base64.b64encode(b'{"_type": "x"}').decode()
    from in_toto.exceptions import SignatureVerificationError

    with pytest.raises(SignatureVerificationError):
        Metadata.from_dict(tampered).verify_signature(key.to_dict() | {"keyid": key.keyid})
    assert read_attestation(data, "a").subject == digest


def test_the_keyid_is_the_sha256_of_the_public_keys_canonical_form(tmp_path: Path) -> None:
    from securesystemslib.formats import encode_canonical

    public = load_public_key(write_key(tmp_path / "k.key"), "key")
    body = {"keytype": public.keytype, "scheme": public.scheme, "keyval": public.keyval}
    assert public.keyid == sha256_digest(encode_canonical(body).encode()).removeprefix("sha256:")
    assert load_signer(f"file:{tmp_path / 'k.key'}").public_key.keyid == public.keyid


def test_a_key_of_another_kind_or_no_key_at_all_is_one_line(tmp_path: Path) -> None:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "rsa.key").write_bytes(
        rsa_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    p384 = ec.generate_private_key(ec.SECP384R1())
    (tmp_path / "p384.key").write_bytes(
        p384.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    (tmp_path / "junk.key").write_text("hello")
    for name, words in [
        ("rsa.key", "a key of type RSA"),
        ("p384.key", "an ECDSA key on secp384r1"),
        ("junk.key", "not a PEM private key"),
        ("absent.key", "cannot read it"),
    ]:
        with pytest.raises(UserError, match=words) as raised:
            load_signer(str(tmp_path / name))
        assert "\n" not in str(raised.value)
    for ref, words in [
        ("gcpkms:projects/p/keys/k", "unknown key scheme 'gcpkms'"),
        ("awskms:arn:aws:kms:us-east-1:1:key/x", "expected awskms:arn:aws:kms:REGION"),
        ("awskms:arn:aws:kms:us-east-1:111122223333:alias/ci", "not an alias"),
        ("sigstore:", "no OIDC identity to sign as"),
    ]:
        with pytest.raises(UserError, match=re.escape(words)) as raised:
            load_signer(ref)
        assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("signers: {}\nrefs: []\n", "signers: expected a mapping"),
        (
            "signers:\n  ci: {keys: [nope.pub]}\nrefs: [{match: '*/*', signers: [ci]}]\n",
            "signers.ci.keys[0] ",
        ),
        (
            "signers:\n  ci: {keys: [ci.pub]}\nrefs: [{match: '*/*', signers: [dev]}]\n",
            "refs[0].signers: 'dev' is not a signer",
        ),
        (
            "signers:\n  ci: {keys: [ci.pub]}\nrefs: [{match: '*/*'}]\n",
            "refs[0]: expected {match: PATTERN, signers: [NAME]}, and at most",
        ),
        (
            "signers:\n  ci: {keys: [ci.pub]}\nrefs: []\nextra: 1\n",
            "expected the fields signers and refs, and at most additions and revoked besides",
        ),
        (
            "signers:\n  ci: {keys: [ci.pub]}\nrefs: [{match: '*/*', signers: [ci]}]\n"
            "additions: {precompile-cache: [ci]}\n",
            "additions.precompile-cache: ci also signs builds (a refs rule names it)",
        ),
        (
            "signers:\n  ci: {keys: [ci.pub]}\n"
            "refs: [{match: '*/*', signers: [ci]}]\nadditions: {weights: [ci]}\n",
            "additions.weights: not a kind of addition (known: precompile-cache)",
        ),
        (
            "signers:\n  ci: {keys: [ci.pub]}\nrefs: [{match: '*/*', signers: [ci]}]\n"
            "additions: {precompile-cache: [nodes]}\n",
            "additions.precompile-cache: 'nodes' is not a signer (known: ci)",
        ),
        (
            "signers:\n  ci: {keys: [ci.pub]}\n  nodes: {keys: [ci.pub]}\n"
            "refs: [{match: '*/*', signers: [ci]}]\nadditions: {precompile-cache: [nodes]}\n",
            "signers.nodes lists key ",  # one key under two names: a node key signing builds
        ),
        (
            "signers:\n  ci: {keys: [ci.pub, ci.pub]}\nrefs: [{match: '*/*', signers: [ci]}]\n",
            "twice",
        ),
        ("signers: [\n", "not YAML at line"),
    ],
)
def test_a_malformed_policy_is_one_line_naming_the_field(
    tmp_path: Path, text: str, field: str
) -> None:
    write_key(tmp_path / "ci.key")
    (tmp_path / "policy.yaml").write_text(text)
    with pytest.raises(PolicyInvalid) as raised:
        load_policy(tmp_path / "policy.yaml")
    assert field in str(raised.value) and "\n" not in str(raised.value)


def test_a_policy_names_its_signers_keyids_in_refusals(tmp_path: Path) -> None:
    public = write_key(tmp_path / "ci.key")
    policy = load_policy(write_policy(tmp_path / "p.yaml", {"ci": [public]}, [("a/*", ["ci"])]))
    keyid = load_public_key(public, "key").keyid
    line = policy.refusal("a/prod", "sha256:" + "0" * 64, [], manifest=ANY_MANIFEST)
    assert line is not None and f"ci (key {keyid[:16]})" in line
    unprotected = policy.refusal(
        "b/prod", "sha256:" + "0" * 64, [], manifest=ANY_MANIFEST, required=False
    )
    assert unprotected is None
