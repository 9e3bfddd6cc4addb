"""Issue 41 item 3: what a node gives back to a build (an addition) is read as untrusted store
data, never passes as a build's attestation, and is laid out only where it may be: captured on a
node with this node's target and builds, naming no path of the manifest's, and under a trust
policy signed by a signer its ``additions`` entry names (never one that signs builds)."""

from __future__ import annotations

import json
from base64 import b64decode, b64encode
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.attest.additions import seal_addition
from neuronbuild.attest.envelope import read_attestation
from neuronbuild.attest.keys import load_signer
from neuronbuild.attest.policy import Policy, load_policy
from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.node.additions import choose_addition
from neuronbuild.store.additions import NodeIdentity, addition_statement, read_addition
from neuronbuild.store.records import FileRecord
from tests.lib.keys import write_key, write_policy

MANIFEST = "sha256:" + "a" * 64
BUILDS = {"vllm-neuron": "0.29.0.1.2.0 sha256:" + "c" * 64, "torch-neuronx": None}
NODE = NodeIdentity("trn2", BUILDS, "node-a", "2026-12-06T10:00:00Z")
TRACE = FileRecord("neuron/precompile_cache/k1/trace.bin", "sha256:" + "b" * 64, 32)
HERE = ("trn2", BUILDS)


def sealed(
    files: tuple[FileRecord, ...] = (TRACE,),
    node: NodeIdentity = NODE,
    signer: Any = None,
) -> tuple[str, bytes]:
    return seal_addition(
        addition_statement("app", MANIFEST, "precompile-cache", node, list(files)), signer
    )


def resealed(change: Any) -> tuple[str, bytes]:
    """An unsigned addition whose Statement ``change`` edited, named by its new payload."""
    _, data = sealed()
    envelope = json.loads(data)
    statement = json.loads(b64decode(envelope["payload"]))
    change(statement)
    payload = canonical_json(statement)
    envelope["payload"] = b64encode(payload).decode()
    return sha256_digest(payload), canonical_json(envelope)


def test_an_addition_reads_back_as_sealed_named_by_its_statement() -> None:
    name, data = sealed()
    addition = read_addition(data, "addition", MANIFEST, name)
    assert (addition.kind, addition.node, addition.files) == ("precompile-cache", NODE, (TRACE,))
    assert addition.keyids == () and addition.size() == 32
    with pytest.raises(StoreDataInvalid, match="does not hash to its name"):
        read_addition(data, "addition", MANIFEST, "sha256:" + "0" * 64)
    with pytest.raises(StoreDataInvalid, match="names another manifest"):
        read_addition(data, "addition", "sha256:" + "f" * 64, name)


def _set(path: list[str], value: Any) -> Any:
    def change(statement: dict[str, Any]) -> None:
        where = statement
        for key in path[:-1]:
            where = where[key]
        where[path[-1]] = value

    return change


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (_set(["predicateType"], "https://slsa.dev/provenance/v1"), "predicate type"),
        (_set(["predicate", "kind"], "weights"), "kind 'weights'"),
        (_set(["predicate", "extra"], 1), "expected exactly kind, node, files"),
        (_set(["predicate", "files"], []), "expected a list of 1 to"),
        (_set(["predicate", "node", "host"], "a\nb"), "node.host"),
        (_set(["predicate", "node", "installed"], {"vllm": 3}), "node.installed"),
        (
            _set(["predicate", "files"], [{**TRACE.to_json(), "path": "../../etc/passwd"}]),
            "path",
        ),
        (
            _set(["predicate", "files"], [{**TRACE.to_json(), "path": ".neuronbuild/layout.json"}]),
            "under .neuronbuild/",
        ),
        (_set(["predicate", "files"], [TRACE.to_json(), TRACE.to_json()]), "listed twice"),
    ],
)
def test_a_hostile_addition_is_one_line(change: Any, problem: str) -> None:
    name, data = resealed(change)
    with pytest.raises(StoreDataInvalid, match="addition") as raised:
        read_addition(data, "addition", MANIFEST, name)
    assert problem in str(raised.value) and "\n" not in str(raised.value)


def test_a_signed_addition_never_passes_as_a_build_attestation(tmp_path: Path) -> None:
    write_key(tmp_path / "node.key")
    _, data = sealed(signer=load_signer(str(tmp_path / "node.key")))
    with pytest.raises(StoreDataInvalid, match="predicate type"):
        read_attestation(data, "attestation")


def chosen(raws: list[tuple[str, bytes]], policy: Policy | None = None, **kw: Any) -> Any:
    here = kw.pop("here", HERE)
    paths = kw.pop("paths", {"neuron/compile_cache/e1/model.neff"})
    return choose_addition(dict(raws), MANIFEST, paths, "precompile-cache", here, policy)


def test_an_addition_of_another_node_or_naming_a_manifest_path_is_skipped_with_why() -> None:
    raws = [sealed()]
    other = {**BUILDS, "vllm-neuron": "0.29.0.1.2.0 sha256:" + "d" * 64}
    picked, notes = chosen(raws, here=("trn2", other))
    assert picked is None
    assert "captured on node-a with vllm-neuron 0.29.0.1.2.0 sha256:cccc" in notes[0]
    assert "this node has 0.29.0.1.2.0 sha256:dddd" in notes[0]
    picked, notes = chosen(raws, here=("trn1", BUILDS))
    assert picked is None and "target trn2, this node's is trn1" in notes[0]
    picked, notes = chosen(raws, paths={TRACE.path})
    assert picked is None and f"names {TRACE.path}, a path of the manifest's" in notes[0]
    picked, notes = chosen(
        raws, paths={"neuron/precompile_cache/k1"}
    )  # a file where it needs a folder
    assert picked is None and "a path of the manifest's" in notes[0]
    picked, notes = chosen(raws)
    assert picked is not None and notes == []


def test_the_newest_addition_is_laid_out_and_a_malformed_one_is_named() -> None:
    older = sealed(node=NodeIdentity("trn2", BUILDS, "node-b", "2026-12-05T10:00:00Z"))
    newer = sealed()
    broken = ("sha256:" + "9" * 64, b"{}")
    picked, notes = chosen([older, newer, broken])
    assert picked.name == newer[0]
    assert len(notes) == 1 and "not a DSSE envelope" in notes[0] and notes[0].endswith("skipped")
    assert notes[0].startswith(f"addition sha256:{'9' * 12} of {MANIFEST[:19]}: ")


@pytest.fixture
def keys(tmp_path: Path) -> dict[str, Any]:
    """CI's key (signs builds), a node's key (signs additions) and a policy naming each."""
    ci, node = write_key(tmp_path / "ci.key"), write_key(tmp_path / "node.key", "p256")
    policy = write_policy(
        tmp_path / "policy.yaml",
        {"ci": [ci], "nodes": [node]},
        [("**", ["ci"])],
        {"precompile-cache": ["nodes"]},
    )
    return {
        "policy": load_policy(policy),
        "ci": load_signer(str(tmp_path / "ci.key")),
        "node": load_signer(str(tmp_path / "node.key")),
        "bare": load_policy(write_policy(tmp_path / "bare.yaml", {"ci": [ci]}, [("**", ["ci"])])),
    }


def test_under_a_policy_only_an_addition_its_additions_signer_signed_is_laid_out(
    keys: dict[str, Any],
) -> None:
    policy = keys["policy"]
    signed = sealed(signer=keys["node"])
    assert chosen([signed], policy)[0] is not None
    assert chosen([signed])[0] is not None  # no policy: as an unsigned manifest is served
    picked, [note] = chosen([sealed()], policy)
    assert picked is None and "found it is unsigned; expected a signature by nodes" in note
    picked, [note] = chosen([sealed(signer=keys["ci"])], policy)  # the builds' key
    assert picked is None and "found a signature by signer ci" in note
    picked, [note] = chosen([signed], keys["bare"])
    assert picked is None and "names no signer of precompile-cache" in note
    # A signature by the node's key over other bytes does not verify.
    envelope = json.loads(signed[1])
    statement = json.loads(b64decode(envelope["payload"]))
    statement["predicate"]["node"]["host"] = "elsewhere"
    payload = canonical_json(statement)
    envelope["payload"] = b64encode(payload).decode()
    forged = (sha256_digest(payload), canonical_json(envelope))
    picked, [note] = chosen([forged], policy)
    assert picked is None and "that does not verify" in note


def test_an_addition_beside_a_file_of_the_build_is_the_builds_folder_and_skipped() -> None:
    """The files capture leaves out (bookkeeping inside an entry of the build) are refused when
    an addition names them: an entry folder of the manifest is the build's alone."""
    picked, [note] = chosen([sealed()], paths={"neuron/precompile_cache/k1/graph.neff"})
    assert picked is None and f"names {TRACE.path}, a path of the manifest's" in note


def test_the_offline_node_reads_the_additions_it_pulled(tmp_path: Path) -> None:
    """A node whose remote is unreachable serves what it pulled: the local tier's additions,
    with a note, not exit 3 (the remote's failure is the note)."""
    from neuronbuild.errors import StoreError
    from neuronbuild.store.cas import Store
    from neuronbuild.store.tiered import TieredStore

    local, remote = Store(str(tmp_path / "l"), create=True), Store(str(tmp_path / "r"), create=True)

    def unreachable(manifest: str) -> dict[str, bytes]:
        raise StoreError("s3://bucket: unreachable")

    remote.get_additions = unreachable  # type: ignore[method-assign]
    tiers = TieredStore(local, remote)
    assert tiers.get_additions(MANIFEST) == {}
    assert tiers.notes == [f"s3://bucket: unreachable; additions read from {local.url} alone"]


def test_a_build_missing_on_either_node_is_a_difference_and_named() -> None:
    more = {**BUILDS, "torch-neuronx": "2.9.0 sha256:" + "d" * 64}  # this node has one more
    picked, [note] = chosen([sealed()], here=("trn2", more))
    assert picked is None and "torch-neuronx not installed, this node has 2.9.0" in note
    fewer = {k: v for k, v in BUILDS.items() if k != "vllm-neuron"}  # this node lacks one
    picked, [note] = chosen([sealed()], here=("trn2", fewer))
    assert picked is None and "this node has not installed" in note


def test_an_addition_file_where_the_build_has_a_folder_is_skipped() -> None:
    folder = (FileRecord("neuron/compile_cache", "sha256:" + "b" * 64, 1),)
    picked, [note] = chosen([sealed(files=folder)])
    assert picked is None and "names neuron/compile_cache, a path of the manifest's" in note


def test_an_addition_signed_by_a_revoked_node_key_is_not_laid_out_and_says_so(
    keys: dict[str, Any], tmp_path: Path
) -> None:
    """Issue 43 item 3: a policy's ``revoked`` list voids a node key's additions too."""
    signed = sealed(signer=keys["node"])
    text = (tmp_path / "policy.yaml").read_text()
    revoked = f"{text}revoked: [{keys['node'].public_key.keyid}]\n"
    (tmp_path / "revoked.yaml").write_text(revoked)
    picked, [note] = chosen([signed], load_policy(tmp_path / "revoked.yaml"))
    assert picked is None and "a key this policy revokes (revoked)" in note, note
