"""A ref pattern that can match no ref is refused when the policy is read, and the check is
exact: every pattern that matches some ref passes it, and the ref it offers as proof is a ref
the pattern matches. A dead pattern such as ``*`` would look as if it protected every ref while
``tag`` found every ref unprotected."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from neuronbuild.attest.policy import PolicyInvalid, load_policy
from neuronbuild.attest.ref_patterns import compile_pattern, example_ref, translate
from neuronbuild.errors import UserError
from neuronbuild.store.layout import REF_PART
from tests.lib.keys import write_key
from tests.lib.properties import examples

DIGEST_TAG = re.compile(r"sha256:[0-9a-f]{64}")


def is_ref(text: str) -> bool:
    """The ref grammar, written from the store's own rule (layout.REF_PART) and the digest
    form serve matches (``<name>/sha256:<64 hex>``)."""
    name, sep, tag = text.partition("/")
    return (
        bool(sep)
        and bool(REF_PART.match(name))
        and bool(REF_PART.match(tag) or DIGEST_TAG.fullmatch(tag))
    )


parts = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,12}", fullmatch=True)
digest_tags = st.from_regex(r"sha256:[0-9a-f]{64}", fullmatch=True)
refs = st.builds(lambda n, t: f"{n}/{t}", parts, parts | digest_tags)


@st.composite
def patterns_matching(draw: st.DrawFn) -> tuple[str, str]:
    """A ref, and a pattern made from it by turning runs of it into wildcards that cover them."""
    ref = draw(refs)
    out, i = [], 0
    while i < len(ref):
        j = draw(st.integers(i + 1, len(ref)))
        run = ref[i:j]
        kind = draw(st.sampled_from(["literal", "star", "stars", "?"]))
        if kind == "star" and "/" not in run:
            out.append("*")
        elif kind == "stars":
            out.append("**")
        elif kind == "?" and len(run) == 1 and run != "/":
            out.append("?")
        else:
            out.append(run)
        i = j
    return "".join(out), ref


@settings(max_examples=examples(300), deadline=None)
@given(patterns_matching())
def test_a_pattern_that_matches_a_ref_is_accepted(case: tuple[str, str]) -> None:
    pattern, ref = case
    assert translate(pattern).fullmatch(ref)
    assert compile_pattern(pattern, "m").fullmatch(ref)


@settings(max_examples=examples(500), deadline=None)
@given(st.text(alphabet="ab0/*?-.:sh256", max_size=14))
def test_the_ref_offered_as_proof_is_a_ref_the_pattern_matches(pattern: str) -> None:
    proof = example_ref(pattern)
    if proof is not None:
        assert is_ref(proof), proof
        assert translate(pattern).fullmatch(proof), proof


@settings(max_examples=examples(300), deadline=None)
@given(st.text(alphabet="ab0/*?-.:sh256", max_size=14), refs)
def test_a_pattern_called_dead_matches_no_ref(pattern: str, ref: str) -> None:
    if example_ref(pattern) is None:
        assert not translate(pattern).fullmatch(ref)


@pytest.mark.parametrize(
    "pattern",
    [
        "*",
        "app",
        "a/b/c",
        "app/",
        "/prod",
        "app/-x",
        "**/**/x",
        "app/sha256:xyz",
        "?",
        "x" * 129 + "/a",
    ],
)
def test_a_pattern_that_matches_no_ref_is_refused_naming_the_field(
    tmp_path: Path, pattern: str
) -> None:
    write_key(tmp_path / "ci.key")
    (tmp_path / "policy.yaml").write_text(
        f"signers: {{ci: {{keys: [ci.pub]}}}}\nrefs: [{{match: '{pattern}', signers: [ci]}}]\n"
    )
    with pytest.raises(PolicyInvalid) as raised:
        load_policy(tmp_path / "policy.yaml")
    message = str(raised.value)
    assert "refs[0].match:" in message and "matches no ref" in message, message
    assert "write name/* for every tag of a name, or ** for every ref" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    "pattern", ["app/*", "*/*", "**", "app**", "app/sha256:*", "x" * 128 + "/a"]
)
def test_patterns_that_match_refs_are_read(pattern: str) -> None:
    assert compile_pattern(pattern, "m")


def test_a_pattern_longer_than_any_ref_is_refused_in_one_line() -> None:
    with pytest.raises(UserError, match="at most 300"):
        compile_pattern("?*" * 151, "refs[0].match")
