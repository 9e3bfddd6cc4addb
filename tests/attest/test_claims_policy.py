"""Issue 22: a node under a trust policy serves only manifests a signer the policy names for the
ref has attested, checked before a blob is fetched; without a policy, signing changes nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from tests.conftest import SERVE_WITHOUT_VLLM, cpu_recipe, publish_build, serve_without_vllm
from tests.lib.commands import neuronbuild_in_process
from tests.lib.keys import write_key, write_policy


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    """A store holding tiny/latest, published by a hand holding no key (as a compromised CI
    runner or a bucket writer would), CI's and a stranger's keys, and a policy naming CI's key
    for every ref of tiny."""
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    data = cpu_recipe(cpu_isa="host", model="./m")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(json.dumps(data))
    store = tmp_path / "store"
    publish_build(Store(str(store), create=True), data, tmp_path, "a", source=str(recipe))
    ci_pub = write_key(tmp_path / "ci.key")
    write_key(tmp_path / "stranger.key", "p256")
    policy = write_policy(tmp_path / "policy.yaml", {"ci": [ci_pub]}, [("tiny/*", ["ci"])])
    return {"root": tmp_path, "store": store, "policy": policy, "key": tmp_path / "ci.key"}


def serve_node(
    node: dict[str, Path], *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str, Path]:
    """``serve --ref tiny/latest --layout-only`` as a node runs it, with an empty local tier in
    front of the store, ``env`` added to this process's environment: (exit code, stdout,
    stderr, local tier)."""
    local = node["root"] / "local"
    done = subprocess.run(
        [sys.executable, "-c", SERVE_WITHOUT_VLLM,
         "--ref", "tiny/latest", "--cache", str(node["store"]), "--local-cache", str(local),
         "--vllm-cache-root", str(node["root"] / "layout"), "--layout-only",
         "--workdir", str(node["root"]), *args],
        capture_output=True, text=True, timeout=60,  # seconds: past it, serve hung
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    return done.returncode, done.stdout, done.stderr, local


def blobs_in(local: Path) -> list[Path]:
    return [p for p in (local / "blobs").rglob("*") if p.is_file()] if local.exists() else []


def sign(node: dict[str, Path], key: Path, target: str = "tiny/latest") -> None:
    code, _, err = neuronbuild_in_process(
        "sign", target, "--key", str(key), "--cache", str(node["store"])
    )
    assert code == 0, err


def test_a_node_refuses_a_manifest_written_by_a_hand_that_holds_no_key_before_any_blob(
    node: dict[str, Path],
) -> None:
    code, _, err, local = serve_node(node, "--policy", str(node["policy"]))
    assert code == 2, err
    assert err.strip().count("\n") == 0, err  # one line
    assert "found no attestation" in err and "expected a signature by ci (key " in err
    assert blobs_in(local) == []
    assert not (node["root"] / "layout").exists()


def test_a_node_serves_the_manifest_once_ci_signed_it(node: dict[str, Path]) -> None:
    sign(node, node["key"])
    code, _, err, local = serve_node(node, "--policy", str(node["policy"]))
    assert code == 0, err
    assert len(blobs_in(local)) == 2  # the check passed and the lay-out fetched


def test_the_policy_comes_from_the_environment_without_the_option(node: dict[str, Path]) -> None:
    local = node["root"] / "local"
    done = serve_without_vllm(
        "--ref", "tiny/latest", "--cache", str(node["store"]), "--local-cache", str(local),
        "--dry-run", "--workdir", str(node["root"]),
        env={"NEURONBUILD_POLICY": str(node["policy"])},
    )  # fmt: skip
    assert done.returncode == 2 and "found no attestation" in done.stderr


def test_a_policy_variable_set_but_empty_is_refused_not_taken_for_no_policy(
    node: dict[str, Path],
) -> None:
    local = node["root"] / "local"
    done = serve_without_vllm(
        "--ref", "tiny/latest", "--cache", str(node["store"]), "--local-cache", str(local),
        "--dry-run", "--workdir", str(node["root"]), env={"NEURONBUILD_POLICY": ""},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "error: $NEURONBUILD_POLICY is set but empty: name a policy file, or unset it"
    )
    assert blobs_in(local) == []


def test_a_signature_by_a_key_the_policy_does_not_name_is_refused_naming_both(
    node: dict[str, Path],
) -> None:
    sign(node, node["root"] / "stranger.key")
    code, _, err, local = serve_node(node, "--policy", str(node["policy"]))
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "a signature by key " in err and "not a signer of tiny/latest" in err
    assert "expected a signature by ci" in err
    assert blobs_in(local) == []


def test_without_a_policy_an_unsigned_manifest_is_served_as_before(node: dict[str, Path]) -> None:
    code, _, err, _ = serve_node(node)
    assert code == 0, err


def test_a_valid_signature_over_another_manifest_is_refused(node: dict[str, Path]) -> None:
    store = Store(str(node["store"]))
    first = store.get_ref("tiny", "latest")
    assert first is not None
    sign(node, node["key"])  # a signed build, then another build, unsigned, moved to latest
    data = cpu_recipe(cpu_isa="host", model="./m", max_num_seqs=2)
    second = publish_build(store, data, node["root"], "b", source=str(node["root"] / "recipe.yaml"))
    assert second != first
    # A hand with write access copies the good attestation beside the new manifest.
    src = Path(store.layout.attestations(first))
    shutil.copytree(src, store.layout.attestations(second))
    code, _, err, local = serve_node(node, "--policy", str(node["policy"]))
    assert code == 2, err
    assert "over another manifest" in err and first[:19] in err
    assert blobs_in(local) == []


def test_a_tampered_payload_is_refused(node: dict[str, Path]) -> None:
    sign(node, node["key"])
    store = Store(str(node["store"]))
    digest = store.get_ref("tiny", "latest")
    assert digest is not None
    (path,) = store.attestation_paths(digest).values()
    envelope = json.loads(Path(path).read_text())
    import base64

    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["predicate"]["runDetails"]["builder"]["id"] = "https://evil.example/ci"
    envelope["payload"] = base64.b64encode(json.dumps(statement).encode()).decode()
    Path(path).write_text(json.dumps(envelope))
    code, _, err, local = serve_node(node, "--policy", str(node["policy"]))
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "signer ci (key " in err and "that does not verify" in err
    assert blobs_in(local) == []


def test_a_manifest_served_by_digest_is_matched_as_its_name_and_digest(
    node: dict[str, Path], tmp_path: Path
) -> None:
    digest = Store(str(node["store"])).get_ref("tiny", "latest")
    assert digest is not None
    only_prod = write_policy(
        tmp_path / "prod.yaml", {"ci": [node["root"] / "ci.pub"]}, [("tiny/prod", ["ci"])]
    )
    sign(node, node["key"])
    base = ("--manifest", digest, "--cache", str(node["store"]), "--dry-run")
    base += ("--workdir", str(node["root"]))
    assert serve_without_vllm(*base, "--policy", str(node["policy"])).returncode == 0
    done = serve_without_vllm(*base, "--policy", str(only_prod))
    assert done.returncode == 2 and "no rule names its signers" in done.stderr
