"""Attestations as a store kind (issue 22, part 3): ``push`` and ``pull`` copy them with their
manifest, ``gc`` keeps them while it lives, ``ls`` lists each ref's signer, ``verify --json``
prints their predicate, and ``tag`` refuses to promote an unsigned build to a protected name."""

from __future__ import annotations

import json
import time
from pathlib import Path

from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from tests.attest.test_claims_policy import node, sign
from tests.lib.commands import neuronbuild_in_process
from tests.lib.keys import write_policy

__all__ = ["node"]


def digest_of(node: dict[str, Path]) -> str:
    digest = Store(str(node["store"])).get_ref("tiny", "latest")
    assert digest is not None
    return digest


def test_push_and_pull_copy_attestations_with_their_manifest_and_a_pulled_node_serves_offline(
    node: dict[str, Path],
) -> None:
    sign(node, node["key"])
    digest, root = digest_of(node), node["root"]
    code, _, err = neuronbuild_in_process(
        "push", "tiny/latest", "--from", str(node["store"]), "--cache", str(root / "shared")
    )
    assert code == 0, err
    assert Store(str(root / "shared")).get_attestations(digest) == Store(
        str(node["store"])
    ).get_attestations(digest)
    code, _, err = neuronbuild_in_process(
        "pull", "tiny/latest", "--cache", str(root / "shared"), "--local-cache",
        str(root / "pulled"), "--policy", str(node["policy"]),
    )  # fmt: skip
    assert code == 0, err
    assert len(Store(str(root / "pulled")).get_attestations(digest)) == 1
    code, _, err = neuronbuild_in_process(
        "serve", "--ref", "tiny/latest", "--cache", str(root / "pulled"), "--dry-run",
        "--workdir", str(root), "--policy", str(node["policy"]),
    )  # fmt: skip
    assert code == 0, err


def test_pull_under_a_policy_refuses_an_unsigned_manifest_before_a_byte_is_copied(
    node: dict[str, Path],
) -> None:
    pulled = node["root"] / "pulled"
    code, _, err = neuronbuild_in_process(
        "pull", "tiny/latest", "--cache", str(node["store"]), "--local-cache", str(pulled),
        "--policy", str(node["policy"]),
    )  # fmt: skip
    assert code == 2 and "found no attestation" in err
    assert not pulled.exists()


def test_gc_keeps_the_attestations_of_a_live_manifest_and_sweeps_those_of_a_dead_one(
    node: dict[str, Path],
) -> None:
    sign(node, node["key"])
    store = Store(str(node["store"]))
    digest = digest_of(node)
    later = time.time() + 30 * 86400
    collect_garbage(store, older_than_days=1, now=later)
    assert len(store.get_attestations(digest)) == 1
    store.backend.delete(store.layout.ref("tiny", "latest"))
    for path in store.backend.find(store.layout.history("tiny", "latest")):
        store.backend.delete(path)
    report = collect_garbage(store, older_than_days=1, now=later)
    assert len(report.deleted["attestations"]) == 1
    assert store.attestation_paths(digest) == {}


def test_ls_lists_the_keys_that_signed_each_refs_manifest(node: dict[str, Path]) -> None:
    code, out, _ = neuronbuild_in_process("ls", "--cache", str(node["store"]), "--json")
    assert json.loads(out)["attestations"] == {digest_of(node): []}
    sign(node, node["key"])
    code, out, _ = neuronbuild_in_process("ls", "--cache", str(node["store"]), "--json")
    (keyids,) = json.loads(out)["attestations"].values()
    code, text, _ = neuronbuild_in_process("ls", "--cache", str(node["store"]))
    assert code == 0 and keyids[0][:16] in text and "SIGNED BY" in text


def test_verify_json_prints_the_predicate_and_under_a_policy_who_signed(
    node: dict[str, Path],
) -> None:
    sign(node, node["key"])
    code, out, err = neuronbuild_in_process(
        "verify", "tiny/latest", "--cache", str(node["store"]), "--policy", str(node["policy"]),
        "--json",
    )  # fmt: skip
    assert code == 0, err
    (entry,) = json.loads(out)["attestations"]
    assert entry["verified"] is True and entry["signer"] == "ci"
    assert entry["predicate_type"] == "https://slsa.dev/provenance/v1"
    assert entry["predicate"]["buildDefinition"]["externalParameters"]["recipe"]["name"] == "tiny"


def test_verify_under_a_policy_fails_an_unsigned_manifest(node: dict[str, Path]) -> None:
    code, _, err = neuronbuild_in_process(
        "verify", "tiny/latest", "--cache", str(node["store"]), "--policy", str(node["policy"])
    )
    assert code == 2 and "found no attestation" in err


def test_tag_refuses_to_promote_an_unsigned_build_to_a_protected_name(
    node: dict[str, Path],
) -> None:
    policy = write_policy(
        node["root"] / "prod.yaml", {"ci": [node["root"] / "ci.pub"]}, [("*/prod", ["ci"])]
    )
    store = ("--cache", str(node["store"]), "--policy", str(policy))
    code, _, err = neuronbuild_in_process("tag", "tiny/latest", "tiny/prod", *store)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "refuses tiny/prod" in err and "expected a signature by ci" in err
    assert Store(str(node["store"])).get_ref("tiny", "prod") is None
    code, _, err = neuronbuild_in_process("tag", "tiny/latest", "tiny/canary", *store)
    assert code == 0, err  # not a protected name
    sign(node, node["key"])
    code, _, err = neuronbuild_in_process("tag", "tiny/latest", "tiny/prod", *store)
    assert code == 0, err


def test_ls_lists_every_ref_when_one_manifests_attestations_cannot_be_read(
    node: dict[str, Path],
) -> None:
    sign(node, node["key"])
    store, digest = Store(str(node["store"])), digest_of(node)
    (path,) = store.attestation_paths(digest).values()
    Path(path).rename(node["root"] / "elsewhere.json")
    Path(path).symlink_to(node["root"] / "elsewhere.json")  # a bad store object
    code, out, err = neuronbuild_in_process("ls", "--cache", str(node["store"]))
    assert code == 0, err
    assert "tiny/latest" in out
    assert "a symbolic link" in err and "its signers are not listed" in err
