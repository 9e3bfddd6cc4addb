"""Issue 22, keyless: a policy names a CI job's OIDC identity and issuer instead of a key, and a
node checks the Sigstore bundle offline (sigstore-python's Verifier, against the trusted root the
policy pins) before a blob is fetched. The bundles are made by a test Sigstore instance written
from the specs (:mod:`tests.lib.sigstore_instance`), and CI's signing runs through
sigstore-python's own clients against that instance's Fulcio and Rekor served on loopback
(:mod:`tests.lib.sigstore_services`), since nothing here reaches Sigstore."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronbuild.attest.builder import builder_from_env
from neuronbuild.attest.keyless import keyless_name
from neuronbuild.attest.statement import statement
from neuronbuild.digest import canonical_json
from neuronbuild.store.cas import Store
from tests.attest.test_claims_policy import blobs_in, node, serve_node
from tests.lib.commands import neuronbuild_in_process
from tests.lib.sigstore_instance import GITHUB, WORKFLOW, SigstoreInstance
from tests.lib.sigstore_services import Services, running, token

__all__ = ["node"]  # the fixture, shared with the key-signed claims

FORK = "https://github.com/fork/repo/.github/workflows/build.yml@refs/heads/main"


@pytest.fixture(scope="module")
def sigstore() -> SigstoreInstance:
    return SigstoreInstance.make()


@pytest.fixture
def keyless(node: dict[str, Path], sigstore: SigstoreInstance) -> dict[str, Path]:
    """``node`` with a policy naming CI's workflow identity (GitHub's issuer) for tiny/*,
    checked against the test instance's trusted root pinned beside it."""
    sigstore.write_root(node["root"] / "trusted_root.json")
    node["policy"].write_text(
        "signers:\n"
        "  ci:\n"
        "    keys:\n"
        f"      - identity: {WORKFLOW}\n"
        f"        issuer: {GITHUB}\n"
        "        trusted_root: trusted_root.json\n"
        "refs: [{match: 'tiny/*', signers: [ci]}]\n"
    )
    return node


def payload(store: Store, digest: str | None = None) -> bytes:
    """The Statement CI signs for tiny/latest (or over ``digest``, claiming that manifest)."""
    latest = store.get_ref("tiny", "latest")
    assert latest is not None
    told = statement(store.get_manifest(latest), digest or latest, builder_from_env({}))
    return canonical_json(told)


def attest(node: dict[str, Path], bundle: bytes, identity: str = WORKFLOW) -> str:
    """Store ``bundle`` as tiny/latest's keyless attestation; returns the manifest digest."""
    store = Store(str(node["store"]))
    digest = store.get_ref("tiny", "latest")
    assert digest is not None
    store.put_attestation(digest, keyless_name(identity, GITHUB), bundle)
    return digest


@pytest.mark.slow
def test_a_node_serves_what_its_ci_identity_signed_keyless_and_verify_prints_it(
    keyless: dict[str, Path], sigstore: SigstoreInstance
) -> None:
    code, _, err, local = serve_node(keyless, "--policy", str(keyless["policy"]))
    assert code == 2 and "found no attestation" in err, err  # the policy is in force
    attest(keyless, sigstore.bundle(payload(Store(str(keyless["store"])))))
    code, _, err, local = serve_node(keyless, "--policy", str(keyless["policy"]))
    assert code == 0, err
    assert len(blobs_in(local)) == 2
    code, out, err = neuronbuild_in_process(
        "verify", "tiny/latest", "--cache", str(keyless["store"]),
        "--policy", str(keyless["policy"]), "--json",
    )  # fmt: skip
    assert code == 0, err
    (entry,) = json.loads(out)["attestations"]
    assert entry["identity"] == f"{WORKFLOW} (issuer {GITHUB})"
    assert (entry["signer"], entry["verified"], entry["problem"]) == ("ci", True, None)
    assert entry["predicate"]["runDetails"]["builder"]["id"] == builder_from_env({}).id
    code, out, _ = neuronbuild_in_process(
        "verify", "tiny/latest", "--cache", str(keyless["store"]), "--policy",
        str(keyless["policy"]),
    )  # fmt: skip
    assert f"attestation by identity {WORKFLOW} (issuer {GITHUB}), ci (verified)" in out


def other_instance(payload: bytes) -> bytes:
    return SigstoreInstance.make().bundle(payload)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (
            lambda s, p, o: s.bundle(p, FORK),
            f"a Sigstore signature by identity {FORK} (issuer {GITHUB}), not a signer of "
            "tiny/latest",
        ),
        (
            lambda s, p, o: s.bundle(p, WORKFLOW, "https://gitlab.example"),
            f"a Sigstore signature by identity {WORKFLOW} (issuer https://gitlab.example), not",
        ),
        (
            lambda s, p, o: other_instance(p),
            "that does not verify (failed to build timestamp certificate chain",
        ),
        (
            lambda s, p, o: s.bundle(
                p,
                logged_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=30),
                signed_at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=20),
            ),
            "that does not verify (failed to build timestamp certificate chain",
        ),
        (
            lambda s, p, o: s.bundle(p, tamper=p.replace(b"tiny", b"evil")),
            "that does not verify (",
        ),
        (lambda s, p, o: s.bundle(o), "over another manifest"),
        (
            lambda s, p, o: s.bundle(p, payload_type="text/plain"),
            "payload type 'text/plain', expected application/vnd.in-toto+json",
        ),
        (
            lambda s, p, o: b'{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}',
            "an unreadable attestation (attestation ",
        ),
        (
            lambda s, p, o: s.bundle(p).replace(b'"treeSize": "1"', b'"treeSize": "2"'),
            "that does not verify (",
        ),
        (
            lambda s, p, o: s.bundle(p, rogue=frozenset({"sct"})),
            "that does not verify (failed to verify SCT on signing certificate",
        ),
        (
            lambda s, p, o: s.bundle(p, rogue=frozenset({"checkpoint"})),
            "that does not verify (invalid log entry: checkpoint: invalid signature",
        ),
        (
            lambda s, p, o: s.bundle(p, rogue=frozenset({"promise"})),
            "that does not verify (invalid log entry: SET: invalid inclusion promise",
        ),
        (
            lambda s, p, o: s.bundle(p, integrated=2**64 - 1),
            "that does not verify (",
        ),
    ],
    ids=[
        "another-identity",
        "another-issuer",
        "another-instance",
        "certificate-expired-when-logged",
        "tampered-payload",
        "over-another-manifest",
        "wrong-payload-type",
        "malformed",
        "bad-inclusion-proof",
        "forged-sct",
        "forged-checkpoint",
        "forged-promise",
        "integrated-time-past-any-date",
    ],
)
def test_a_node_refuses_a_keyless_attestation_that_does_not_hold_in_one_line(
    keyless: dict[str, Path], sigstore: SigstoreInstance, make: object, words: str
) -> None:
    store = Store(str(keyless["store"]))
    other = "sha256:" + "e" * 64
    attest(keyless, make(sigstore, payload(store), payload(store, other)))  # type: ignore[operator]
    code, _, err, local = serve_node(keyless, "--policy", str(keyless["policy"]))
    assert code == 2 and err.strip().count("\n") == 0, err
    assert words in err, err
    assert f"expected a signature by ci (identity {WORKFLOW} (issuer {GITHUB}))" in err
    assert blobs_in(local) == []


def test_the_public_good_root_is_read_offline_and_refuses_a_bundle_it_did_not_certify(
    keyless: dict[str, Path], sigstore: SigstoreInstance
) -> None:
    """Without trusted_root, the root is Sigstore's public-good one as the installed sigstore
    ships it: read with no network, it refuses a certificate from any other CA."""
    text = keyless["policy"].read_text().replace("        trusted_root: trusted_root.json\n", "")
    keyless["policy"].write_text(text)
    attest(keyless, sigstore.bundle(payload(Store(str(keyless["store"])))))
    code, _, err, local = serve_node(keyless, "--policy", str(keyless["policy"]))
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "that does not verify (failed to build timestamp certificate chain" in err
    assert blobs_in(local) == []


def test_signing_keyless_with_no_oidc_identity_is_one_line_and_writes_nothing(
    keyless: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SIGSTORE_ID_TOKEN", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "CIRCLECI"):
        monkeypatch.delenv(name, raising=False)
    code, out, err = neuronbuild_in_process(
        "sign", "tiny/latest", "--key", "sigstore:", "--cache", str(keyless["store"])
    )
    assert code == 2 and out == "", err
    assert err.strip() == (
        "error: --key 'sigstore:': no OIDC identity to sign as; run in CI with an OIDC token "
        "(GitHub Actions: permissions: id-token: write), or set $SIGSTORE_ID_TOKEN"
    )
    store = Store(str(keyless["store"]))
    digest = store.get_ref("tiny", "latest")
    assert digest is not None and store.get_attestations(digest) == {}


@pytest.fixture
def services(sigstore: SigstoreInstance) -> Iterator[Services]:
    with running(sigstore) as served:
        yield served


def sign_keyless(node: dict[str, Path], services: Services) -> tuple[int, str, str]:
    config = services.trust_config(node["root"] / "trust_config.json")
    return neuronbuild_in_process(
        "sign", "tiny/latest", "--key", f"sigstore:{config}", "--cache", str(node["store"]),
        "--json",
    )  # fmt: skip


@pytest.mark.slow
def test_ci_signs_keyless_through_fulcio_and_rekor_and_a_node_serves_it(
    keyless: dict[str, Path], services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI side end to end: sigstore-python's own clients ask the instance's Fulcio for a
    certificate (the job's OIDC token) and log the envelope in its Rekor; the node checks the
    bundle offline. Signing again as the same identity replaces the attestation."""
    monkeypatch.setenv("SIGSTORE_ID_TOKEN", token(WORKFLOW.removeprefix("https://github.com/")))
    for _ in range(2):
        code, out, err = sign_keyless(keyless, services)
        assert code == 0, err
    signed = json.loads(out)
    assert signed["signer"] == f"identity {WORKFLOW} (issuer {GITHUB})"
    assert signed["keyid"] == keyless_name(WORKFLOW, GITHUB)
    store = Store(str(keyless["store"]))
    digest = store.get_ref("tiny", "latest")
    assert digest is not None and list(store.get_attestations(digest)) == [signed["keyid"]]
    code, _, err, local = serve_node(keyless, "--policy", str(keyless["policy"]))
    assert code == 0, err
    assert len(blobs_in(local)) == 2
    # Sigstore's own CLI verifies the stored bundle over the manifest digest (README, step 6).
    (path,) = store.attestation_paths(digest).values()
    for identity, code in [(WORKFLOW, 0), (FORK, 1)]:
        done = subprocess.run(
            [sys.executable, "-m", "sigstore", "--trust-config",
             str(keyless["root"] / "trust_config.json"), "verify", "identity", digest,
             "--bundle", path, "--cert-identity", identity, "--cert-oidc-issuer", GITHUB,
             "--offline"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == code, done.stderr


@pytest.mark.parametrize(
    ("setup", "code", "words"),
    [
        (lambda s, m: s.down.add("fulcio"), 3, "did not sign: Fulcio: 500 Server Error"),
        (
            lambda s, m: s.down.add("rekor"),
            3,
            "did not sign: Rekor: Rekor returned an unknown error with HTTP 500",
        ),
        (lambda s, m: s.server.server_close(), 3, "did not sign: "),
        (
            lambda s, m: m.setenv("SIGSTORE_ID_TOKEN", token("org/repo/x.yml@main", minutes=-1)),
            2,
            "the OIDC identity token expired at ",
        ),
        (lambda s, m: m.setenv("SIGSTORE_ID_TOKEN", "not-a-jwt"), 2, "Identity token is"),
    ],
    ids=["fulcio-down", "rekor-down", "sigstore-unreachable", "expired-token", "not-a-token"],
)
def test_keyless_signing_that_cannot_sign_is_one_line_and_writes_nothing(
    keyless: dict[str, Path],
    services: Services,
    monkeypatch: pytest.MonkeyPatch,
    setup: object,
    code: int,
    words: str,
) -> None:
    monkeypatch.setenv("SIGSTORE_ID_TOKEN", token(WORKFLOW.removeprefix("https://github.com/")))
    setup(services, monkeypatch)  # type: ignore[operator]
    got, out, err = sign_keyless(keyless, services)  # --json: the error is a JSON document
    assert got == code and err.strip().count("\n") == 0 and words in err, err
    assert json.loads(out)["exit_code"] == code
    store = Store(str(keyless["store"]))
    digest = store.get_ref("tiny", "latest")
    assert digest is not None and store.get_attestations(digest) == {}


def test_a_keyless_attestation_travels_as_an_oci_referrer_of_the_bundles_own_type(
    sigstore: SigstoreInstance,
) -> None:
    from neuronbuild.image.referrers import DSSE_MEDIA_TYPE, artifact_type

    bundle = sigstore.bundle(b"{}")
    assert artifact_type(bundle) == "application/vnd.dev.sigstore.bundle.v0.3+json"
    assert artifact_type(b'{"payload": "", "payloadType": "x", "signatures": []}') == (
        DSSE_MEDIA_TYPE
    )
    for odd in (
        b'{"mediaType": "application/vnd.dev.sigstore.bundle.v9"}',
        b"[",
        b'"x"',
        b"[" * 100_000,
    ):
        assert artifact_type(odd) == DSSE_MEDIA_TYPE


def test_the_identity_a_certificate_claims_is_read_whatever_its_issuers_length(
    sigstore: SigstoreInstance,
) -> None:
    from neuronbuild.attest.keyless import claimed_identity, read_bundle

    for issuer in (GITHUB, "https://issuer.example/" + "a" * 140, "https://" + "é" * 200):
        bundle = read_bundle(sigstore.bundle(b"{}", "ci@example.com", issuer), "t")
        assert claimed_identity(bundle) == ("ci@example.com", issuer)


def test_seal_signs_keyless_before_the_ref_moves(
    keyless: dict[str, Path], services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from neuronbuild.attest.policy import load_policy

    monkeypatch.setenv("SIGSTORE_ID_TOKEN", token(WORKFLOW.removeprefix("https://github.com/")))
    config = services.trust_config(keyless["root"] / "trust_config.json")
    code, out, err = neuronbuild_in_process(
        "seal", str(keyless["root"] / "recipe.yaml"), "--cache", str(keyless["store"]),
        "--tag", "signed", "--sign", f"sigstore:{config}", "--json",
    )  # fmt: skip
    assert code == 0, err
    (signed,) = json.loads(out)["signed"]
    assert signed["signer"] == f"identity {WORKFLOW} (issuer {GITHUB})"
    store = Store(str(keyless["store"]))
    assert store.get_ref("tiny", "signed") == signed["manifest"]
    (data,) = store.get_attestations(signed["manifest"]).values()
    policy = load_policy(keyless["policy"])
    manifest = store.get_manifest(signed["manifest"])
    assert (
        policy.refusal("tiny/signed", signed["manifest"], [("k", data)], manifest=manifest) is None
    )


@pytest.mark.slow
def test_a_root_planted_in_the_users_sigstore_cache_does_not_become_the_public_good_root(
    keyless: dict[str, Path], sigstore: SigstoreInstance, tmp_path: Path
) -> None:
    """sigstore's offline TUF reader prefers a trusted_root.json in the user's cache to the one
    it ships; the public-good root is read from the package, so a planted one changes nothing,
    and a node whose home is read-only still reads it."""
    text = keyless["policy"].read_text().replace("        trusted_root: trusted_root.json\n", "")
    keyless["policy"].write_text(text)
    attest(keyless, sigstore.bundle(payload(Store(str(keyless["store"])))))
    cache = tmp_path / "cache"
    planted = cache / "sigstore-python" / "tuf" / "https%3A%2F%2Ftuf-repo-cdn.sigstore.dev"
    planted.mkdir(parents=True)
    sigstore.write_root(planted / "trusted_root.json")
    for env in ({"XDG_CACHE_HOME": str(cache)}, {"XDG_CACHE_HOME": "/proc/no", "HOME": "/proc"}):
        code, _, err, local = serve_node(keyless, "--policy", str(keyless["policy"]), env=env)
        assert code == 2 and "that does not verify (failed to build timestamp" in err, err
        assert blobs_in(local) == []


def test_an_identity_named_under_an_old_and_a_new_root_verifies_with_either(
    keyless: dict[str, Path], sigstore: SigstoreInstance
) -> None:
    """A trust root being rotated: the same identity twice, the first entry under a root that
    did not certify the bundle; the second verifies it, and verify agrees with serve."""
    SigstoreInstance.make().write_root(keyless["root"] / "old_root.json")
    text = keyless["policy"].read_text()
    entry = f"      - identity: {WORKFLOW}\n        issuer: {GITHUB}\n"
    text = text.replace("    keys:\n", f"    keys:\n{entry}        trusted_root: old_root.json\n")
    keyless["policy"].write_text(text)
    attest(keyless, sigstore.bundle(payload(Store(str(keyless["store"])))))
    code, _, err, _ = serve_node(keyless, "--policy", str(keyless["policy"]))
    assert code == 0, err
    code, out, err = neuronbuild_in_process(
        "verify", "tiny/latest", "--cache", str(keyless["store"]),
        "--policy", str(keyless["policy"]),
    )  # fmt: skip
    assert code == 0 and "ci (verified)" in out, err


def test_a_policy_may_pin_the_client_trust_config_a_private_instance_signs_with(
    keyless: dict[str, Path], sigstore: SigstoreInstance, services: Services
) -> None:
    config = services.trust_config(keyless["root"] / "trust_config.json")
    text = keyless["policy"].read_text().replace("trusted_root.json", config.name)
    keyless["policy"].write_text(text)
    attest(keyless, sigstore.bundle(payload(Store(str(keyless["store"])))))
    code, _, err, _ = serve_node(keyless, "--policy", str(keyless["policy"]))
    assert code == 0, err


def test_a_token_that_expired_by_the_time_compile_signs_is_one_line(
    keyless: dict[str, Path], services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compile checks the token when it starts and reads it again when it signs, hours later."""
    from neuronbuild.attest.keyless_sign import keyless_signer
    from neuronbuild.errors import UserError

    config = services.trust_config(keyless["root"] / "trust_config.json")
    monkeypatch.setenv("SIGSTORE_ID_TOKEN", token(WORKFLOW.removeprefix("https://github.com/")))
    signer = keyless_signer(f"sigstore:{config}", "--sign")
    monkeypatch.setenv("SIGSTORE_ID_TOKEN", token("org/repo/x.yml@main", minutes=-1))
    with pytest.raises(UserError) as raised:
        signer.sign({"_type": "https://in-toto.io/Statement/v1"})
    message = str(raised.value)
    assert "\n" not in message and message.startswith("--sign 'sigstore:"), message
    # Issue 46 item 10: when and how long ago, and how to get a fresh one; not sigstore's
    # "Identity token is malformed or missing claims".
    assert re.search(
        r"the OIDC identity token expired at \S+\+00:00 \(1 min( \d+ s)? ago\)", message
    )
    assert "let the step that signs fetch its own" in message and "malformed" not in message


def test_a_bare_sigstore_key_ref_names_the_colon(tmp_path: Path) -> None:
    from neuronbuild.attest.keys import load_signer
    from neuronbuild.errors import UserError

    with pytest.raises(UserError, match="write sigstore: \\(with the colon\\)"):
        load_signer("sigstore", "--sign")


@pytest.mark.parametrize(
    ("identity", "issuer", "problem"),
    [
        (WORKFLOW, GITHUB + "/", "named without a trailing /; write " + GITHUB),
        ("https://github.com/org/repo/.*", GITHUB, "compared exactly, not as a pattern"),
        ("^ci@example.com$", GITHUB, "compared exactly, not as a pattern"),
    ],
)
def test_a_keyless_entry_that_can_never_match_is_refused_in_one_line(
    tmp_path: Path, identity: str, issuer: str, problem: str
) -> None:
    """Issue 46 item 12: an issuer with a trailing ``/`` and an identity written as a pattern
    are compared exactly with a certificate's, so they never match: refused, not accepted."""
    from neuronbuild.attest.policy import PolicyInvalid, load_policy

    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "signers:\n  ci:\n    keys:\n"
        f"      - identity: {json.dumps(identity)}\n        issuer: {issuer}\n"
        "refs: [{match: '**', signers: [ci]}]\n"
    )
    with pytest.raises(PolicyInvalid) as raised:
        load_policy(policy)
    assert problem in str(raised.value) and "signers.ci.keys[0]" in str(raised.value)


def test_a_keyless_signer_cannot_be_named_for_additions(tmp_path: Path) -> None:
    """An addition is signed with a key (capture --key): a signer with identities alone could
    never pass, so the policy naming it for additions is refused, not loaded to refuse all."""
    from neuronbuild.attest.policy import PolicyInvalid, load_policy
    from tests.lib.keys import write_key

    policy = tmp_path / "policy.yaml"
    write_key(tmp_path / "ci.key")
    policy.write_text(
        "signers:\n  ci: {keys: [ci.pub]}\n  nodes:\n    keys:\n"
        f"      - identity: {WORKFLOW}\n        issuer: {GITHUB}\n"
        "refs: [{match: '**', signers: [ci]}]\nadditions: {precompile-cache: [nodes]}\n"
    )
    with pytest.raises(PolicyInvalid, match="nodes has only keyless identities"):
        load_policy(policy)


SOURCE_REPOSITORY = "1.3.6.1.4.1.57264.1.12"
BUILD_TRIGGER = "1.3.6.1.4.1.57264.1.20"
REUSABLE = "https://github.com/org/shared/.github/workflows/build.yml@refs/heads/main"


@pytest.mark.parametrize(
    ("claims", "accepted"),
    [
        ({SOURCE_REPOSITORY: "https://github.com/org/repo", BUILD_TRIGGER: "push"}, True),
        ({SOURCE_REPOSITORY: "https://github.com/fork/repo", BUILD_TRIGGER: "push"}, False),
        ({SOURCE_REPOSITORY: "https://github.com/org/repo", BUILD_TRIGGER: "pull_request"}, False),
        ({BUILD_TRIGGER: "push"}, False),
    ],
)
def test_a_reusable_workflows_identity_is_accepted_only_from_the_callers_the_policy_names(
    keyless: dict[str, Path], sigstore: SigstoreInstance, claims: dict[str, str], accepted: bool
) -> None:
    """Issue 43 item 4: a reusable workflow's identity is the same whichever repository calls
    it; the policy names the caller's repository and trigger (Fulcio's extensions), as cosign's
    ``--certificate-github-workflow-repository`` and ``-trigger`` do."""
    from neuronbuild.attest.policy import load_policy

    keyless["policy"].write_text(
        "signers:\n  ci:\n    keys:\n"
        f"      - identity: {REUSABLE}\n        issuer: {GITHUB}\n"
        "        trusted_root: trusted_root.json\n"
        "        source_repository: https://github.com/org/repo\n"
        "        build_trigger: push\n"
        "refs: [{match: 'tiny/*', signers: [ci]}]\n"
    )
    store = Store(str(keyless["store"]))
    digest = attest(keyless, sigstore.bundle(payload(store), REUSABLE, claims=claims), REUSABLE)
    policy = load_policy(keyless["policy"])
    attestations = list(store.get_attestations(digest).items())
    line = policy.refusal("tiny/latest", digest, attestations, manifest=store.get_manifest(digest))
    if accepted:
        assert line is None
    else:
        assert line is not None and "a Sigstore signature by identity " in line, line
        assert "that does not verify" in line and "\n" not in line, line
        assert "expected a signature by ci (identity " in line
        assert "source_repository https://github.com/org/repo, build_trigger push))" in line


def test_a_keyless_signatures_age_is_rekors_not_the_statements(
    keyless: dict[str, Path], sigstore: SigstoreInstance
) -> None:
    """Issue 43 items 1 and 2: a keyless signature's time is when Rekor logged it (a trusted
    time), whatever the Statement's own ``finishedOn`` claims (here: now)."""
    from neuronbuild.attest.policy import load_policy

    text = keyless["policy"].read_text()
    keyless["policy"].write_text(text.replace("signers: [ci]}", "signers: [ci], max_age_days: 1}"))
    store = Store(str(keyless["store"]))
    three_days_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    digest = attest(keyless, sigstore.bundle(payload(store), signed_at=three_days_ago))
    policy = load_policy(keyless["policy"])
    attestations = list(store.get_attestations(digest).items())
    line = policy.refusal("tiny/latest", digest, attestations, manifest=store.get_manifest(digest))
    assert line is not None and "its newest accepted signature was made 3.0 days ago" in line
    digest = attest(keyless, sigstore.bundle(payload(store)))
    attestations = list(store.get_attestations(digest).items())
    assert (
        policy.refusal("tiny/latest", digest, attestations, manifest=store.get_manifest(digest))
        is None
    )


def test_a_bundle_without_an_inclusion_promise_states_no_time(sigstore: SigstoreInstance) -> None:
    """Review of issue 43: an inclusion proof does not cover the integrated time, so a store
    writer could set it; only a promise (which the verifier checks) makes it a trusted time."""
    from neuronbuild.attest.keyless import logged_time, read_bundle

    bundle = read_bundle(sigstore.bundle(b"{}"), "b")
    assert logged_time(bundle) is not None
    bundle.log_entry._inner.inclusion_promise = None  # as a bundle with a TSA timestamp instead
    assert logged_time(bundle) is None


def test_revoking_an_identity_keeps_what_rekor_logged_before_it(
    keyless: dict[str, Path], sigstore: SigstoreInstance
) -> None:
    """Issue 43 item 3: an identity's ``expires`` (set at a compromise) revokes the signatures
    Rekor logged after it and keeps every build logged before, since Rekor's time is trusted;
    a key's signatures state no trusted time, so a revoked key keeps nothing."""
    from neuronbuild.attest.policy import load_policy

    revoked_at = dt.datetime.now(dt.UTC) - dt.timedelta(days=1)
    keyless["policy"].write_text(
        keyless["policy"]
        .read_text()
        .replace(
            "        trusted_root: trusted_root.json\n",
            "        trusted_root: trusted_root.json\n"
            f"        expires: {revoked_at.strftime('%Y-%m-%dT%H:%M:%SZ')}\n",
        )
    )
    policy = load_policy(keyless["policy"])
    store = Store(str(keyless["store"]))
    a_minute_ago = None  # the instance's default: Rekor logs it a minute before now
    for logged, kept in ((revoked_at - dt.timedelta(days=2), True), (a_minute_ago, False)):
        digest = attest(keyless, sigstore.bundle(payload(store), signed_at=logged))
        attestations = list(store.get_attestations(digest).items())
        manifest = store.get_manifest(digest)
        line = policy.refusal("tiny/latest", digest, attestations, manifest=manifest)
        if kept:
            assert line is None, line
        else:
            assert line is not None and "\n" not in line, line
            assert "after its identity expired " in line and "(expires)" in line, line
        code, out, _ = neuronbuild_in_process(
            "verify", "tiny/latest", "--cache", str(keyless["store"]),
            "--policy", str(keyless["policy"]), "--json",
        )  # fmt: skip
        [entry] = json.loads(out)["attestations"]
        assert (code, entry["verified"]) == ((0, True) if kept else (2, False)), (code, entry)
    [identity] = policy.signers["ci"].identities
    now, expires = revoked_at.timestamp() + 1, revoked_at.timestamp()
    assert identity.void_at(None, now) is not None  # no trusted time, past expires: void
    assert identity.void_at(None, expires - 1) is None  # not yet
    assert identity.void_at(expires - 1, now) is None  # logged before: kept
