"""Naming a manifest as git and docker users do: a unique digest prefix (with or without
``sha256:``), the short form the tool prints, a bare name for ``<name>/latest``; and a missing
ref, an unknown, ambiguous or too short prefix are one line naming what exists."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import UserError
from neuronbuild.human import size
from neuronbuild.store.cas import Store
from neuronbuild.store.names import (
    LISTED_REFS,
    MIN_PREFIX_HEX,
    Listing,
    Target,
    resolve,
    resolve_target,
    short,
)
from tests.conftest import cpu_recipe, neuronbuild, publish_build


@pytest.fixture
def two_builds(tmp_path: Path) -> tuple[Store, str, str]:
    store = Store(str(tmp_path / "store"), create=True)
    first = publish_build(store, cpu_recipe(cpu_isa="host", seed=1), tmp_path, "a")
    second = publish_build(store, cpu_recipe(cpu_isa="host", seed=2), tmp_path, "b")
    return store, first, second  # tiny/latest -> second


def test_a_unique_prefix_with_or_without_its_algorithm_names_the_manifest(
    two_builds: tuple[Store, str, str],
) -> None:
    store, first, second = two_builds
    for digest in (first, second):
        hexdigest = digest.removeprefix("sha256:")
        assert store.resolve_target(digest[: 7 + MIN_PREFIX_HEX]) == Target(digest)
        assert store.resolve_target(hexdigest[:MIN_PREFIX_HEX]) == Target(digest)
        assert store.resolve_target(hexdigest) == Target(digest)
        assert store.resolve(short(digest)) == digest  # what human output prints works back


def test_a_bare_name_is_its_latest_ref(two_builds: tuple[Store, str, str]) -> None:
    store, _, second = two_builds
    assert store.resolve_target("tiny") == Target(second, ("tiny", "latest"))
    assert store.resolve_target("tiny/latest") == Target(second, ("tiny", "latest"))
    assert store.resolve_target("tiny", accept="ref") == Target(second, ("tiny", "latest"))


def test_a_prefix_below_the_minimum_is_refused_with_the_minimum(
    two_builds: tuple[Store, str, str],
) -> None:
    store, first, _ = two_builds
    with pytest.raises(UserError, match=f"at least {MIN_PREFIX_HEX} hex digits"):
        store.resolve(first[: 7 + MIN_PREFIX_HEX - 1])


def test_an_unknown_prefix_is_one_line(two_builds: tuple[Store, str, str]) -> None:
    store, first, second = two_builds
    unknown = "00000000" if "00000000" not in (first[7:15], second[7:15]) else "ffffffff"
    with pytest.raises(UserError) as raised:
        store.resolve(f"sha256:{unknown}")
    assert str(raised.value) == (
        f"{store.url}: no manifest starts with sha256:{unknown} (neuronbuild ls lists them)"
    )
    with pytest.raises(UserError, match="expected a manifest digest"):
        store.resolve("sha256:xyz12345")


def listing(refs: dict[str, str], manifests: list[str]) -> Listing:
    return Listing(
        lambda name, tag: refs.get(f"{name}/{tag}"),
        lambda: sorted(refs),
        lambda: manifests,
        "s3://bucket/store",
    )


A = "sha256:3f2a9c1b" + "0" * 56
B = "sha256:3f2a9c1b" + "1" * 56
C = "sha256:3f2a9c2b" + "0" * 56


def test_an_ambiguous_prefix_names_the_manifests_it_starts() -> None:
    names = listing({}, [A, B, C])
    with pytest.raises(UserError) as raised:
        resolve_target(names, "sha256:3f2a9c1b")
    message = str(raised.value)
    assert "ambiguous" in message and short(A) in message and short(B) in message
    assert short(C) not in message and "\n" not in message
    assert resolve_target(names, "3f2a9c1b0").digest == A  # one more digit settles it
    assert resolve_target(names, "sha256:3f2a9c2b").digest == C


def test_a_bare_word_that_is_both_a_name_and_a_prefix_is_refused_not_guessed() -> None:
    names = listing({"3f2a9c2b/latest": A}, [A, C])
    with pytest.raises(UserError, match="write 3f2a9c2b/latest or sha256:3f2a9c2b"):
        resolve_target(names, "3f2a9c2b")
    assert resolve_target(names, "3f2a9c2b/latest") == Target(A, ("3f2a9c2b", "latest"))
    assert resolve_target(names, "sha256:3f2a9c2b") == Target(C)


def test_a_missing_ref_lists_the_refs_that_exist(two_builds: tuple[Store, str, str]) -> None:
    store, _, _ = two_builds
    with pytest.raises(UserError) as raised:
        store.resolve("tiny/prod")
    assert str(raised.value) == f"{store.url}: no ref tiny/prod; refs there: tiny/latest"
    with pytest.raises(UserError, match="no ref tinny/latest; refs there: tiny/latest"):
        store.resolve("tinny")
    empty = Store(str(two_builds[0].root) + "-empty", create=True)
    with pytest.raises(UserError, match="no ref tiny/latest; the store has no refs yet"):
        empty.resolve("tiny")


def test_many_refs_are_listed_nearest_first_and_cut() -> None:
    refs = {f"app-{i:02d}/latest": A for i in range(30)} | {"web/prod": A}
    with pytest.raises(UserError) as raised:
        resolve_target(listing(refs, [A]), "web/latest")
    shown = str(raised.value).split("refs there: ", 1)[1]
    assert shown.startswith("web/prod, ")  # alphabetically last, nearest to what was asked
    assert len(re.findall(r"[\w-]+/\w+", shown.split(" and ")[0])) == LISTED_REFS
    assert shown.endswith(f"and {31 - LISTED_REFS} more (neuronbuild ls)")


@pytest.mark.slow
def test_commands_take_prefixes_and_bare_names_and_push_moves_the_named_ref(
    two_builds: tuple[Store, str, str], tmp_path: Path
) -> None:
    store, first, second = two_builds
    tagged = neuronbuild("tag", first[:15], "tiny/prod", "--cache", store.url)
    assert tagged.returncode == 0, tagged.stderr
    assert store.get_ref("tiny", "prod") == first
    assert tagged.stdout == f"tiny/prod: (new ref) -> {first}\n"  # a result line: digests in full
    moved = neuronbuild("tag", "tiny", "tiny/prod", "--cache", store.url)
    assert moved.stdout == f"tiny/prod: {first} -> {second}\n", moved.stderr
    rolled = neuronbuild("tag", first, "tiny/prod", "--rollback", "--cache", store.url)
    assert rolled.returncode == 0, rolled.stderr
    verified = neuronbuild("verify", first[7:19], "--cache", store.url)
    assert verified.returncode == 0, verified.stderr
    blobs = store.get_manifest(first).blobs()
    held = size(sum(b.size for b in blobs))
    assert verified.stdout == f"{first}: {len(blobs)} blobs, {held} present with their sizes: ok\n"
    pushed = neuronbuild("push", "tiny", "--from", store.url, "--cache", str(tmp_path / "far"))
    assert pushed.returncode == 0, pushed.stderr
    assert Store(str(tmp_path / "far")).refs() == {"tiny/latest": second}
    missing = neuronbuild("serve", "--ref", "tiny/canary", "--cache", store.url, "--dry-run")
    assert missing.returncode == 2
    assert missing.stderr.strip().endswith("refs there: tiny/latest, tiny/prod")
    assert "Traceback" not in missing.stderr


def test_ls_prints_short_digests_that_resolve_and_moves_in_utc_with_their_age(
    two_builds: tuple[Store, str, str],
) -> None:
    store, first, second = two_builds
    listed = neuronbuild("ls", "--history", "--cache", store.url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[1].split() == ["tiny/latest", short(second), "-", "0"]  # no key, no receipt
    assert store.resolve(lines[1].split()[1]) == second
    moves = [line for line in lines if " UTC (" in line]
    assert len(moves) == 2  # newest first
    assert re.match(r"^  \d{4}-\d\d-\d\d \d\d:\d\d UTC \((just now|\d+ s ago)\)", moves[0])
    assert moves[0].split()[-2:] == [short(first), short(second)]
    assert moves[1].split()[-2:] == ["-", short(first)]  # a new ref came from nothing
    held = size(store.summary()["bytes"])
    assert (
        lines[-1] == f"2 manifests, 2 unit records, 4 blobs ({held}), 0 node layouts in {store.url}"
    )


def test_one_resolver_reads_what_each_caller_accepts_and_refuses_a_typo() -> None:
    names = listing({"app/latest": A, "app/prod": C}, [A, C])
    assert resolve(names, "app") == Target(A, ("app", "latest"))
    assert resolve(names, "app/prod", "ref") == Target(C, ("app", "prod"))
    assert resolve(names, "3f2a9c2b", "manifest") == Target(C)
    with pytest.raises(UserError, match="no ref 3f2a9c2b/latest"):
        resolve(names, "3f2a9c2b", "ref")  # a prefix is no ref
    with pytest.raises(UserError, match="expected a manifest digest"):
        resolve(names, "app/prod", "manifest")  # a ref is no manifest
    with pytest.raises(UserError, match=r"no ref web/latest; refs there: .*; pull it first"):
        resolve(names, "web", hint="pull it first")
    with pytest.raises(ValueError, match="accept='manfest'"):
        resolve(names, "app", "manfest")  # type: ignore[arg-type]  # a caller's typo
    assert Target(A, ("app", "prod")).ref_text == "app/prod"
    assert Target(A).ref_text is None


def test_status_and_ls_history_show_a_missing_manifest_as_tag_does(
    two_builds: tuple[Store, str, str], write_recipe: Any
) -> None:
    store, first, _ = two_builds
    other = write_recipe(cpu_recipe(cpu_isa="host", name="other"))
    status = neuronbuild("status", str(other), "--cache", store.url)
    assert status.returncode == 0, status.stderr
    assert "other/latest -> -\n" in status.stdout
    history = neuronbuild("ls", "--history", "--cache", store.url)
    first_move = history.stdout.split("history of tiny/latest:\n")[1].splitlines()[-2]
    assert first_move.split()[-2:] == ["-", short(first)]  # a table: digests short
