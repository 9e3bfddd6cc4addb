"""A trust policy file is read strictly: a key given twice, a FIFO for the policy or a key, a ref
pattern that would match across ``/``, a pinned keyid the file does not hold, a KMS key or keyid
without its public key, and a keyless signer of the wrong shape are each one line (exit 2), never a hang or a
traceback; and the keys a policy names by fingerprint or KMS ARN name their signer in refusals."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from neuronbuild.attest.keys import load_public_key, load_signer
from neuronbuild.attest.policy import PolicyInvalid, load_policy
from neuronbuild.attest.ref_patterns import covers, translate
from neuronbuild.errors import UserError
from tests.lib.commands import neuronbuild_in_process
from tests.lib.keys import ANY_MANIFEST, write_key

ARN = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
DIGEST = "sha256:" + "0" * 64


def policy_at(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


def refused(path: Path) -> str:
    with pytest.raises(PolicyInvalid) as raised:
        load_policy(path)
    message = str(raised.value)
    assert "\n" not in message, message
    return message


def test_a_key_given_twice_is_refused_naming_it_and_both_lines(tmp_path: Path) -> None:
    write_key(tmp_path / "ci.key")
    write_key(tmp_path / "other.key")
    text = (
        "signers:\n"
        "  ci:\n"
        "    keys: [ci.pub]\n"
        "  ci:\n"  # line 4: YAML would keep this one, silently
        "    keys: [other.pub]\n"
        "refs: [{match: 'a/*', signers: [ci]}]\n"
    )
    message = refused(policy_at(tmp_path, text))
    assert "signers.ci: duplicate key, at lines 2 and 4" in message, message


def test_a_key_given_twice_in_a_rule_is_refused_too(tmp_path: Path) -> None:
    write_key(tmp_path / "ci.key")
    text = (
        "signers: {ci: {keys: [ci.pub]}}\n"
        "refs:\n"
        "  - match: a/prod\n"
        "    signers: [ci]\n"
        "    match: '**'\n"
    )
    assert "refs[0].match: duplicate key, at lines 3 and 5" in refused(policy_at(tmp_path, text))


@pytest.mark.parametrize(
    ("pattern", "ref", "matches"),
    [
        ("app/*", "app/prod", True),
        ("app/*", "app/sha256:" + "0" * 64, True),
        ("app*", "app-canary/prod", False),  # fnmatch's * would cross the /
        ("*/*", "app/prod", True),
        ("*/prod", "app/prod", True),
        ("*/prod", "team/app/prod", False),
        ("**", "app/prod", True),
        ("app**", "app-canary/prod", True),
        ("app/pro?", "app/prod", True),
        ("app?prod", "app/prod", False),
        ("app/prod", "app/prod", True),
        ("app/prod", "app/prod2", False),  # the whole ref, not a prefix
        ("a.p/x", "aXp/x", False),  # a dot is a dot
    ],
)
def test_a_star_stops_at_a_slash_and_two_stars_cross_it(
    pattern: str, ref: str, matches: bool
) -> None:
    assert (translate(pattern).fullmatch(ref) is not None) is matches


def test_a_pattern_with_characters_no_ref_holds_is_refused(tmp_path: Path) -> None:
    write_key(tmp_path / "ci.key")
    text = "signers: {ci: {keys: [ci.pub]}}\nrefs: [{match: 'app/[pq]rod', signers: [ci]}]\n"
    message = refused(policy_at(tmp_path, text))
    assert "refs[0].match: 'app/[pq]rod' holds characters no ref holds ('[]')" in message


def test_the_first_rule_whose_pattern_covers_the_ref_decides(tmp_path: Path) -> None:
    write_key(tmp_path / "ci.key")
    write_key(tmp_path / "rel.key")
    text = (
        "signers: {ci: {keys: [ci.pub]}, rel: {keys: [rel.pub]}}\n"
        "refs: [{match: 'app/prod', signers: [rel]}, {match: 'app-c/*', signers: [ci]},"
        " {match: '*/*', signers: [ci]}]\n"
    )
    policy = load_policy(policy_at(tmp_path, text))
    assert [r.match for r in map(policy.rule_for, ["app/prod", "app-b/x", "app/x"]) if r] == [
        "app/prod",
        "*/*",
        "*/*",
    ]


@pytest.mark.parametrize(
    ("first", "later"),
    [("**", "app/prod"), ("*/*", "app/prod"), ("app/*", "app/rel-?"), ("*/*", "app/**")],
)
def test_a_rule_an_earlier_rule_shadows_is_refused_naming_both(
    tmp_path: Path, first: str, later: str
) -> None:
    """Issue 43 item 6: with ``**`` listed before ``app/prod``, the stricter rule never applied,
    silently."""
    write_key(tmp_path / "ci.key")
    write_key(tmp_path / "rel.key")
    text = (
        "signers: {ci: {keys: [ci.pub]}, rel: {keys: [rel.pub]}}\n"
        f"refs: [{{match: '{first}', signers: [ci]}}, {{match: '{later}', signers: [rel]}}]\n"
    )
    message = refused(policy_at(tmp_path, text))
    assert f"refs[1].match: '{later}' can never apply: refs[0] ('{first}') comes first" in message
    assert "put the narrower rule first" in message
    swapped = text.replace(first, "@").replace(later, first).replace("@", later)
    assert [r.match for r in load_policy(policy_at(tmp_path, swapped)).rules] == [later, first]


@pytest.mark.parametrize(
    ("outer", "inner", "covered"),
    [
        ("**", "app/prod", True),
        ("app/prod", "*/*", False),
        ("app/*", "app/sha256:*", True),
        ("app/*", "apps/prod", False),
        ("*p/*", "app/x", True),
        ("app/p?od", "app/p*d", False),
        ("app/x*", "app/*x", False),
        ("*/prod", "**/prod", True),  # no ref holds two /
        ("app/*", "app/-*", True),  # matches no ref: vacuously
    ],
)
def test_covers_decides_by_every_ref_not_by_the_text(outer: str, inner: str, covered: bool) -> None:
    assert covers(outer, inner) is covered


@pytest.mark.parametrize("who", ["file", "folder"])
def test_a_policy_or_key_every_user_may_write_is_refused(tmp_path: Path, who: str) -> None:
    """Issue 43 item 6, as sshd's StrictModes: a world-writable policy was used."""
    folder = tmp_path / "trust"
    folder.mkdir()
    write_key(folder / "ci.key")
    path = policy_at(
        folder, "signers: {ci: {keys: [ci.pub]}}\nrefs: [{match: '**', signers: [ci]}]\n"
    )
    load_policy(path)
    target = path if who == "file" else folder
    target.chmod(target.stat().st_mode | 0o002)
    message = refused(path)
    fix = f"chmod o-w {target}"
    assert "writable by every user" in message and fix in message, message
    folder.chmod(folder.stat().st_mode | 0o1000)  # sticky: no one replaces another's file
    if who == "folder":
        assert load_policy(path).rules


def test_a_key_every_user_may_write_is_refused_naming_its_field(tmp_path: Path) -> None:
    write_key(tmp_path / "ci.key")
    (tmp_path / "ci.pub").chmod(0o646)
    message = refused(
        policy_at(
            tmp_path, "signers: {ci: {keys: [ci.pub]}}\nrefs: [{match: '**', signers: [ci]}]\n"
        )
    )
    assert "signers.ci.keys[0]" in message and "chmod o-w" in message, message


def _in_a_thread(call: object) -> BaseException | None:
    """Run ``call`` in a thread, failing the test if it has not returned in 10 s (a FIFO open
    blocks forever); what it raised, or None."""
    result: list[BaseException | None] = []

    def run() -> None:
        try:
            call()  # type: ignore[operator]
            result.append(None)
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():
        pytest.fail("blocked on a FIFO")
    return result[0]


def test_a_fifo_as_the_policy_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "policy.yaml"
    os.mkfifo(fifo)
    raised = _in_a_thread(lambda: load_policy(fifo))
    assert isinstance(raised, PolicyInvalid), raised
    assert str(raised) == (
        f"--policy {fifo}: a FIFO, not a regular file; give a policy file (YAML)"
    )


def test_a_fifo_as_a_policy_key_is_refused_naming_its_field(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "ci.pub")
    path = policy_at(
        tmp_path, "signers: {ci: {keys: [ci.pub]}}\nrefs: [{match: '**', signers: [ci]}]\n"
    )
    raised = _in_a_thread(lambda: load_policy(path))
    assert isinstance(raised, PolicyInvalid), raised
    assert "signers.ci.keys[0] " in str(raised) and "a FIFO, not a regular file" in str(raised)


def test_a_fifo_as_the_signing_key_is_refused_by_seal_in_one_line(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "ci.key")
    raised = _in_a_thread(lambda: load_signer(str(tmp_path / "ci.key")))
    assert isinstance(raised, UserError), raised
    assert str(raised) == (
        f"--sign {tmp_path / 'ci.key'}: a FIFO, not a regular file; give a PEM key file"
    )


def test_a_folder_as_the_policy_is_refused(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    assert "a directory, not a regular file" in refused(tmp_path / "p")


def test_verify_with_a_fifo_policy_exits_2_in_one_line(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "policy.yaml")
    code, _, err = neuronbuild_in_process(
        "verify",
        "a/b",
        "--cache",
        str(tmp_path / "store"),
        "--policy",
        str(tmp_path / "policy.yaml"),
    )
    assert code == 2 and "a FIFO, not a regular file" in err and err.count("\n") == 1, err


# -- keys named by fingerprint and by KMS key ARN ------------------------------------------


def test_a_pinned_keyid_admits_its_file_and_refuses_another(tmp_path: Path) -> None:
    public = write_key(tmp_path / "ci.key")
    other = write_key(tmp_path / "other.key")
    keyid = load_public_key(public, "k").keyid
    text = "signers: {ci: {keys: [{file: %s, keyid: %s}]}}\nrefs: [{match: '**', signers: [ci]}]\n"
    policy = load_policy(policy_at(tmp_path, text % (public.name, keyid)))
    assert [k.keyid for k in policy.signers["ci"].keys] == [keyid]
    message = refused(policy_at(tmp_path, text % (other.name, keyid)))
    assert "signers.ci.keys[0].file" in message and f"not the pinned keyid {keyid}" in message


@pytest.mark.parametrize(
    ("entry", "words"),
    [
        ("{keyid: " + "a" * 64 + "}", "a keyid alone cannot verify a signature offline; add file:"),
        (f"{{kms: 'awskms:{ARN}'}}", "an ARN alone cannot verify a signature offline"),
        ("{file: ci.pub, keyid: ABC}", "keys[0].keyid: expected the 64 lowercase hex digits"),
        ("{file: ci.pub, kms: 'awskms:arn:aws:kms:eu-west-1:1:alias/ci'}", "not an alias"),
        ("{file: ci.pub, kms: 'gcpkms:x'}", "keys[0].kms 'gcpkms:x': expected awskms:"),
        ("{file: ci.pub, color: red}", "keys[0]: expected one of PATH, {file: PATH, keyid: HEX}"),
        (
            f"{{file: ci.pub, kms: 'awskms:{ARN}'}}",
            "holds a key of type ed25519, but a KMS signer's key is ECC_NIST_P256",
        ),
        ("{identity: ci@example.com}", "keys[0]: a keyless signer is exactly {identity: ID, "),
        (
            "{identity: ci@example.com, issuer: 'http://issuer.example'}",
            "keys[0].issuer: expected the OIDC issuer's https:// URL",
        ),
        (
            "{identity: '', issuer: 'https://issuer.example'}",
            "keys[0].identity: expected the certificate's email or URI",
        ),
        (
            "{identity: a@b.c, issuer: 'https://issuer.example', trusted_root: nope.json}",
            "keys[0].trusted_root ",
        ),
        (
            "{identity: a@b.c, issuer: 'https://issuer.example', trusted_root: ci.pub}",
            "keys[0].trusted_root ",
        ),
        (
            "{identity: a@b.c, issuer: 'https://issuer.example', file: ci.pub}",
            "keys[0]: a keyless signer is exactly {identity: ID, issuer: URL}",
        ),
    ],
)
def test_a_key_entry_that_cannot_verify_offline_is_one_line(
    tmp_path: Path, entry: str, words: str
) -> None:
    write_key(tmp_path / "ci.key")  # ed25519
    text = f"signers: {{ci: {{keys: [{entry}]}}}}\nrefs: [{{match: '**', signers: [ci]}}]\n"
    assert words in refused(policy_at(tmp_path, text))


def test_a_keyless_signer_outside_keys_is_one_line_naming_where_it_goes(tmp_path: Path) -> None:
    text = (
        "signers:\n"
        "  release:\n"
        "    identity: https://github.com/org/models/.github/workflows/build.yml@refs/heads/main\n"
        "    issuer: https://token.actions.githubusercontent.com\n"
        "refs: [{match: '**', signers: [release]}]\n"
    )
    message = refused(policy_at(tmp_path, text))
    assert "signers.release: a keyless signer is an entry of keys: {keys: [{identity: " in message


def test_a_kms_key_names_its_arn_in_the_refusal(tmp_path: Path) -> None:
    public = write_key(tmp_path / "kms.key", "p256")
    text = f"signers: {{ci: {{keys: [{{kms: 'awskms:{ARN}', file: kms.pub}}]}}}}\n"
    policy = load_policy(policy_at(tmp_path, text + "refs: [{match: 'a/*', signers: [ci]}]\n"))
    keyid = load_public_key(public, "k").keyid
    line = policy.refusal("a/prod", DIGEST, [], manifest=ANY_MANIFEST)
    assert line is not None and f"expected a signature by ci (key {keyid[:16]} at {ARN})" in line


def test_a_policy_or_key_is_named_where_the_user_gave_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46 item 13: a bad ``$NEURONBUILD_POLICY`` is named as the variable, not as an
    option the user never passed; ``--key file:`` names no file, not ``.``."""
    from neuronbuild.attest.trust import policy_from

    missing = tmp_path / "nope.yaml"
    monkeypatch.setenv("NEURONBUILD_POLICY", str(missing))
    with pytest.raises(PolicyInvalid, match=rf"^\$NEURONBUILD_POLICY {missing}: cannot read"):
        policy_from(None)
    with pytest.raises(PolicyInvalid, match=rf"^--policy {missing}: cannot read"):
        policy_from(str(missing))
    for ref in ("file:", ""):
        with pytest.raises(UserError, match=rf"^--key '{ref}': names no file; give file:PATH"):
            load_signer(ref, "--key")
