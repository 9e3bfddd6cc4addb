"""Issue 43 item 3: keys that can be rotated and revoked, and k-of-n signers. A key with an
``expires`` date verifies nothing from then on; a policy's ``revoked`` list voids a key's every
signature; a rule's ``threshold`` needs that many of its signers."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from neuronbuild.attest.keys import load_public_key
from neuronbuild.attest.policy import PolicyInvalid, load_policy
from neuronbuild.store.cas import Store
from tests.attest.test_bindings import fleet, serve
from tests.lib.commands import neuronbuild_in_process
from tests.lib.keys import write_key

__all__ = ["fleet"]


def policy_text(signers: str, rule: str = "", revoked: str = "") -> str:
    return f"signers:\n{signers}refs:\n  - match: '**'\n    signers: [ci, release]\n{rule}{revoked}"


def sign(fleet: dict[str, Path], key: str, ref: str = "app/latest") -> None:
    code, _, err = neuronbuild_in_process(
        "sign", ref, "--key", str(fleet["root"] / key), "--cache", str(fleet["store"])
    )
    assert code == 0, err


def judged(fleet: dict[str, Path], ref: str = "app/latest") -> str | None:
    """The policy's refusal of ``ref``'s build, or None."""
    store = Store(str(fleet["store"]))
    digest = store.get_ref(*ref.split("/"))
    assert digest is not None
    attestations = list(store.get_attestations(digest).items())
    policy = load_policy(fleet["policy"])
    return policy.refusal(ref, digest, attestations, manifest=store.get_manifest(digest))


@pytest.fixture
def keys(fleet: dict[str, Path]) -> dict[str, str]:
    """A next CI key and a release key beside CI's current one (ci.key), their keyids."""
    write_key(fleet["root"] / "next.key")
    write_key(fleet["root"] / "release.key", "p256")
    return {
        name: load_public_key(fleet["root"] / f"{name}.pub", name).keyid
        for name in ("ci", "next", "release")
    }


def test_a_key_is_rotated_by_listing_the_next_and_letting_the_old_expire(
    fleet: dict[str, Path], keys: dict[str, str]
) -> None:
    # 1. The next key is listed beside the current one; builds signed by either are served.
    signers = "  ci:\n    keys: [ci.pub, next.pub]\n  release:\n    keys: [release.pub]\n"
    fleet["policy"].write_text(policy_text(signers))
    assert judged(fleet) is None  # app/latest: signed by the current key (ci.key)
    # 2. CI signs with the next key from now on; then the old key expires.
    sign(fleet, "next.key")
    expired = (
        "  ci:\n    keys: [{file: ci.pub, expires: 2026-01-01}, next.pub]\n"
        "  release:\n    keys: [release.pub]\n"
    )
    fleet["policy"].write_text(policy_text(expired))
    assert judged(fleet) is None  # the next key's signature stands
    line = judged(fleet, "other/latest")  # signed by the expired key alone
    assert line is not None
    assert f"a signature by signer ci (key {keys['ci'][:16]}), a key that expired " in line
    assert "2026-01-01T00:00:00Z (expires)" in line
    code, err = serve(fleet, "other/latest")
    assert code == 2 and err.strip().count("\n") == 0 and "a key that expired" in err, err


def test_a_revoked_key_signs_nothing_and_its_builds_are_signed_again(
    fleet: dict[str, Path], keys: dict[str, str]
) -> None:
    signers = "  ci:\n    keys: [ci.pub, next.pub]\n  release:\n    keys: [release.pub]\n"
    fleet["policy"].write_text(policy_text(signers, revoked=f"revoked: [{keys['ci']}]\n"))
    line = judged(fleet)
    assert line is not None and "a key this policy revokes (revoked)" in line, line
    code, out, _ = neuronbuild_in_process(
        "verify", "app/latest", "--cache", str(fleet["store"]), "--policy", str(fleet["policy"]),
        "--json",
    )  # fmt: skip
    [entry] = json.loads(out)["attestations"]
    assert code == 2 and entry["signer"] == "ci" and entry["verified"] is False, entry
    assert "a key this policy revokes" in entry["problem"], entry
    sign(fleet, "next.key")
    assert judged(fleet) is None
    assert serve(fleet, "app/latest")[0] == 0


def test_a_threshold_needs_that_many_signers(fleet: dict[str, Path], keys: dict[str, str]) -> None:
    signers = "  ci:\n    keys: [ci.pub, next.pub]\n  release:\n    keys: [release.pub]\n"
    fleet["policy"].write_text(policy_text(signers, rule="    threshold: 2\n"))
    sign(fleet, "next.key")  # a second key of the same signer is still one signer
    line = judged(fleet)
    assert line is not None and "found signatures by 1 of its signers (ci)" in line, line
    assert "expected a signature by each of 2 of its signers: ci (" in line, line
    sign(fleet, "release.key")
    assert judged(fleet) is None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("    threshold: 3\n", "refs[0].threshold: 3 of 2 signers can never be met"),
        ("    threshold: 0\n", "refs[0].threshold: 0 of 2 signers can never be met"),
        ("    threshold: two\n", "refs[0].threshold: expected a whole number"),
        ("revoked: [nope]\n", "revoked: expected a list of keyids"),
        ("", "signers.ci.keys[0].expires: expected a date"),
    ],
)
def test_bad_lifecycle_fields_are_one_line(
    fleet: dict[str, Path], keys: dict[str, str], extra: str, message: str
) -> None:
    keys_line = "[{file: ci.pub, expires: soon}]" if not extra else "[ci.pub]"
    signers = f"  ci:\n    keys: {keys_line}\n  release:\n    keys: [release.pub]\n"
    text = policy_text(signers, rule=extra if extra.startswith("    ") else "")
    fleet["policy"].write_text(text + ("" if extra.startswith("    ") else extra))
    with pytest.raises(PolicyInvalid) as raised:
        load_policy(fleet["policy"])
    assert message in str(raised.value) and "\n" not in str(raised.value), raised.value


def test_an_expiry_in_the_future_changes_nothing(
    fleet: dict[str, Path], keys: dict[str, str]
) -> None:
    later = time.strftime("%Y-%m-%d", time.gmtime(time.time() + 30 * 86400))
    signers = f"  ci:\n    keys: [{{file: ci.pub, expires: {later}}}]\n  release:\n    keys: [release.pub]\n"
    fleet["policy"].write_text(policy_text(signers))
    assert judged(fleet) is None
