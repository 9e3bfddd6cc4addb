"""``seal --sign`` and ``compile --sign`` sign each manifest they seal, before its ref moves, so a
node under a policy never finds a ref on a build its CI made but had not yet signed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from neuronbuild.attest.envelope import read_attestation
from neuronbuild.orchestrate.seal import seal_plans
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from tests.attest.test_claims_policy import node
from tests.conftest import cpu_recipe
from tests.lib.commands import neuronbuild_in_process

__all__ = ["node"]


def test_seal_sign_attests_the_manifest_it_seals(node: dict[str, Path]) -> None:
    code, out, err = neuronbuild_in_process(
        "seal", str(node["root"] / "recipe.yaml"), "--cache", str(node["store"]),
        "--tag", "signed", "--sign", f"file:{node['key']}", "--json",
    )  # fmt: skip
    assert code == 0, err
    (signed,) = json.loads(out)["signed"]
    store = Store(str(node["store"]))
    assert signed["manifest"] == store.get_ref("tiny", "signed")
    (data,) = store.get_attestations(signed["manifest"]).values()
    assert read_attestation(data, "a").subject == signed["manifest"]


def test_the_manifest_is_signed_before_its_ref_moves(node: dict[str, Path]) -> None:
    store = Store(str(node["store"]))
    plan = build_plan(
        parse_recipe(cpu_recipe(cpu_isa="host", model="./m"), str(node["root"] / "recipe.yaml"))
    )
    seen: list[str | None] = []
    seal_plans(
        [plan], store, tag="fresh", on_sealed=lambda d: seen.append(store.get_ref("tiny", "fresh"))
    )
    assert seen == [None] and store.get_ref("tiny", "fresh") is not None


def test_a_bad_key_is_refused_before_anything_is_sealed(node: dict[str, Path]) -> None:
    code, _, err = neuronbuild_in_process(
        "seal", str(node["root"] / "recipe.yaml"), "--cache", str(node["store"]),
        "--tag", "never", "--sign", str(node["root"] / "absent.key"),
    )  # fmt: skip
    assert code == 2 and "--sign" in err and "cannot read it" in err
    assert Store(str(node["store"])).get_ref("tiny", "never") is None


@pytest.mark.slow
def test_compile_sign_in_ci_and_a_node_under_the_policy_serves_the_build(tmp_path: Path) -> None:
    from tests.lib.keys import write_key, write_policy
    from tests.orchestrate.test_shards import double_env, double_recipe, neuronbuild, write_recipes

    (recipe,) = write_recipes(tmp_path, [double_recipe("app")])
    env = double_env(tmp_path, GITHUB_ACTIONS="true", GITHUB_REPOSITORY="org/models")
    env.update(GITHUB_RUN_ID="7", GITHUB_WORKFLOW_REF="org/models/.github/workflows/b.yml@main")
    public = write_key(tmp_path / "ci.key", "p256")
    store = str(tmp_path / "store")
    built = neuronbuild(
        "compile", recipe, "--cache", store, "--sign", str(tmp_path / "ci.key"), env=env
    )
    assert built.returncode == 0, built.stderr
    assert "signed sha256:" in built.stdout
    policy = write_policy(tmp_path / "policy.yaml", {"ci": [public]}, [("app/*", ["ci"])])
    done = neuronbuild(
        "verify", "app/latest", "--cache", store, "--policy", str(policy), "--json", env=env
    )
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)["attestations"]
    assert entry["signer"] == "ci"
    run = entry["predicate"]["runDetails"]
    assert run["builder"]["id"] == "https://github.com/org/models/.github/workflows/b.yml@main"
    assert run["metadata"]["invocationId"].endswith("/org/models/actions/runs/7/attempts/1")
