"""Issue 41 item 3 in the store: an addition lives while its manifest does, keeps its blobs
alive while it does, and travels with its manifest (push, pull, a node's read-through) so a
pulled node lays it out offline."""

from __future__ import annotations

import json
from base64 import b64encode
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.attest.additions import seal_addition
from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.errors import StoreDataInvalid
from neuronbuild.node.additions import add_to_layout
from neuronbuild.store.additions import NodeIdentity, addition_statement, read_addition
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from neuronbuild.store.records import FileRecord
from neuronbuild.store.tiered import TieredStore
from neuronbuild.store.transfer import copy_manifest
from tests.store.test_claims_gc import LATER, sealed

NODE = NodeIdentity("trn2", {"vllm-neuron": "0.29.0.1.2.0"}, "node-a", "2026-12-06T10:00:00Z")


def added(store: Store, tmp_path: Path, manifest: str, content: bytes) -> tuple[str, FileRecord]:
    """An unsigned addition of one trace holding ``content`` to ``manifest``, blob first."""
    src = tmp_path / f"trace-{len(content)}"
    src.write_bytes(content)
    digest, size = store.put_file(src)
    trace = FileRecord("neuron/precompile_cache/k/trace.bin", digest, size)
    statement = addition_statement("app", manifest, "precompile-cache", NODE, [trace])
    name, data = seal_addition(statement, None)
    store.put_addition(manifest, name, data)
    return name, trace


def test_gc_keeps_the_additions_of_a_kept_manifest_with_their_blobs_and_sweeps_a_dead_ones(
    tmp_path: Path,
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    kept, dead = sealed(store, tmp_path, 0), sealed(store, tmp_path, 1)
    store.move_ref("app", "latest", kept, None)
    alive, alive_trace = added(store, tmp_path, kept, b"a trace of the kept build")
    _, dead_trace = added(store, tmp_path, dead, b"a trace of the dead one")
    report = collect_garbage(store, now=LATER)
    assert list(store.get_additions(kept)) == [alive] and store.get_additions(dead) == {}
    assert store.check_blob(alive_trace) is None
    assert not store.has_blob(dead_trace)
    assert len(report.deleted["additions"]) == 1


def test_a_pull_carries_the_additions_and_their_blobs(tmp_path: Path) -> None:
    shared = Store(str(tmp_path / "shared"), create=True)
    digest = sealed(shared, tmp_path, 0)
    name, trace = added(shared, tmp_path, digest, b"a trace")
    shared.put_addition(digest, "sha256:" + "e" * 64, b"{}")  # malformed: never copied
    node = Store(str(tmp_path / "node"), create=True)
    report = copy_manifest(shared, node, digest)
    assert list(node.get_additions(digest)) == [name]
    assert node.get_additions(digest)[name] == shared.get_additions(digest)[name]
    assert node.check_blob(trace) is None
    assert any("not a DSSE envelope" in note and "not copied" in note for note in report.notes)


MANIFEST = "sha256:" + "a" * 64


def sealed_object() -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A good unsigned addition to :data:`MANIFEST`: its name, envelope and Statement."""
    trace = FileRecord("neuron/precompile_cache/k/trace.bin", "sha256:" + "b" * 64, 8)
    statement = addition_statement("app", MANIFEST, "precompile-cache", NODE, [trace])
    name, data = seal_addition(statement, None)
    return name, json.loads(data), statement


def envelope_of(statement: dict[str, Any]) -> tuple[str, bytes]:
    payload = canonical_json(statement)
    envelope = {"payload": b64encode(payload).decode(), "payloadType": PAYLOAD, "signatures": []}
    return sha256_digest(payload), canonical_json(envelope)


PAYLOAD = "application/vnd.in-toto+json"
SIG = {"keyid": "k" * 64, "sig": "c2ln"}


def edited_envelope(change: Any) -> Any:
    def make() -> tuple[str, bytes]:
        name, envelope, _ = sealed_object()
        return name, canonical_json(change(envelope))

    return make


def edited_statement(change: Any) -> Any:
    def make() -> tuple[str, bytes]:
        _, _, statement = sealed_object()
        return envelope_of(change(statement))

    return make


def _node(**edit: Any) -> Any:
    return edited_statement(
        lambda s: {**s, "predicate": {**s["predicate"], "node": {**s["predicate"]["node"], **edit}}}
    )


HOSTILE = {
    "not canonical": (
        lambda: (sealed_object()[0], json.dumps(sealed_object()[1], indent=1).encode()),
        "not in canonical form",
    ),
    "a list": (edited_envelope(lambda e: [e]), "not a DSSE envelope (payload, payloadType, "),
    "another field": (edited_envelope(lambda e: {**e, "x": 1}), "not a DSSE envelope"),
    "payload type": (
        edited_envelope(lambda e: {**e, "payloadType": "text/plain"}),
        "payload type 'text/plain', expected application/vnd.in-toto+json",
    ),
    "signatures not a list": (
        edited_envelope(lambda e: {**e, "signatures": {}}),
        "expected at most 16 signatures",
    ),
    "17 signatures": (
        edited_envelope(lambda e: {**e, "signatures": [SIG] * 17}),
        "expected at most 16 signatures",
    ),
    "a bare signature": (
        edited_envelope(lambda e: {**e, "signatures": [{"keyid": "k"}]}),
        "a signature that is not {keyid, sig}",
    ),
    "a keyid with a newline": (
        edited_envelope(lambda e: {**e, "signatures": [{**SIG, "keyid": "a\nb"}]}),
        "keyid: expected a printable string of at most 128 characters",
    ),
    "a payload not base64": (
        edited_envelope(lambda e: {**e, "payload": "%%%"}),
        "its payload is not base64",
    ),
    "another name": (
        edited_statement(lambda s: {**s, "extra": 1}),
        "not an in-toto Statement v1",
    ),
    "a _type": (
        edited_statement(lambda s: {**s, "_type": "x"}),
        "_type 'x', expected https://in-toto.io/Statement/v1",
    ),
    "two subjects": (
        edited_statement(lambda s: {**s, "subject": s["subject"] * 2}),
        "expected exactly one subject with a digest",
    ),
    "a subject without a digest": (
        edited_statement(lambda s: {**s, "subject": [{"name": "app"}]}),
        "expected exactly one subject with a digest",
    ),
    "a node field": (_node(extra=1), "node: expected exactly target, installed, host, captured"),
    "a long target": (
        _node(target="t" * 33),
        "node.target: expected a printable string of at most 32 characters",
    ),
    "an empty host": (_node(host=""), "node.host: expected a printable string of at most 255"),
    "a long capture time": (_node(captured="2" * 41), "node.captured: expected a printable"),
    "an installed name": (_node(installed={"": "1"}), "node.installed: expected a printable"),
    "an installed build": (
        _node(installed={"vllm": "1\n2"}),
        "node.installed: expected distribution -> build or null",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_addition_object_is_one_line_naming_it(case: str) -> None:
    """Each check of the object's reader (issue 41 item 3), by its message: an addition is
    store data, read as a record is."""
    make, problem = HOSTILE[case]
    name, data = make()
    with pytest.raises(StoreDataInvalid) as raised:
        read_addition(data, "addition X", MANIFEST, name)
    message = str(raised.value)
    assert message.startswith("addition X") and problem in message, message
    assert "\n" not in message


def test_an_addition_reads_back_whole() -> None:
    name, envelope, statement = sealed_object()
    assert statement["subject"] == [{"name": "app", "digest": {"sha256": "a" * 64}}]
    signed = canonical_json({**envelope, "signatures": [SIG]})
    addition = read_addition(signed, "addition", MANIFEST, name)
    assert (addition.name, addition.manifest, addition.kind) == (name, MANIFEST, "precompile-cache")
    assert addition.node == NODE and addition.keyids == ("k" * 64,)
    assert addition.signatures == (("k" * 64, "c2ln"),) and addition.size() == 8
    assert addition.payload == canonical_json(statement)


def test_the_limits_are_inclusive_and_the_name_does_not_depend_on_file_order() -> None:
    """The boundaries of the reader's bounds (a value of exactly the limit is read, one more is
    not), and an addition's name, which the same files in another order do not change."""
    at_limit = NodeIdentity("t" * 32, {"d" * 128: "v" * 255}, "h", "c" * 40)
    statement = addition_statement(
        "app", MANIFEST, "precompile-cache", at_limit, [FileRecord("a", "sha256:" + "b" * 64, 1)]
    )
    name, data = seal_addition(statement, None)
    sixteen = [{"keyid": "k" * 128, "sig": "s" * 1024}] * 16
    signed = canonical_json({**json.loads(data), "signatures": sixteen})
    assert read_addition(signed, "addition", MANIFEST, name).node == at_limit
    for edit, what in [
        ({"host": "h" * 256}, "node.host"),
        ({"installed": {"d" * 129: "v"}}, "node.installed: expected a printable"),
        ({"installed": {"d": "v" * 256}}, "node.installed: expected distribution"),
    ]:
        name, data = _node(**edit)()
        with pytest.raises(StoreDataInvalid, match=f"^addition: {what}"):
            read_addition(data, "addition", MANIFEST, name)
    for signatures, what in [
        ([{"keyid": "k", "sig": "s" * 1025}], "sig: expected a printable string of at most 1024"),
        ([{"keyid": "k", "sig": "\x00"}], "sig: expected a printable"),
    ]:
        name, envelope, _ = sealed_object()
        data = canonical_json({**envelope, "signatures": signatures})
        with pytest.raises(StoreDataInvalid, match=f"^addition: {what}"):
            read_addition(data, "addition", MANIFEST, name)
    files = [FileRecord(p, "sha256:" + "b" * 64, 1) for p in ("b/2", "a/1", "c/3")]
    names = {
        seal_addition(addition_statement("app", MANIFEST, "precompile-cache", NODE, order), None)[0]
        for order in (files, files[::-1], sorted(files, key=lambda f: f.path))
    }
    assert len(names) == 1


def test_what_the_reader_found_is_named() -> None:
    slsa = "https://slsa.dev/provenance/v1"
    name, data = edited_statement(lambda s: {**s, "predicateType": slsa})()
    with pytest.raises(StoreDataInvalid) as raised:
        read_addition(data, "addition X", MANIFEST, name)
    assert str(raised.value) == (
        f"addition X: predicate type '{slsa}', expected https://neuronbuild.dev/addition/v1"
    )
    name, envelope, statement = sealed_object()
    loose = json.dumps(statement).encode()  # not the canonical spelling
    data = canonical_json({**envelope, "payload": b64encode(loose).decode()})
    with pytest.raises(StoreDataInvalid, match=r"^addition X: payload: not in canonical form"):
        read_addition(data, "addition X", MANIFEST, sha256_digest(loose))
    bad_subject = [{"name": "app", "digest": {"sha256": "nothex"}}]
    name, data = edited_statement(lambda s: {**s, "subject": bad_subject})()
    with pytest.raises(StoreDataInvalid, match=r"^addition X"):
        read_addition(data, "addition X", MANIFEST, name)


def test_gc_keeps_the_newest_addition_of_each_node_identity_and_signer(tmp_path: Path) -> None:
    """An autoscaled fleet's captures do not pile up: of one kind, node identity and signer set
    the newest stays (what a node of that identity lays out); an unsigned one never replaces a
    signed one, nor one of another node identity."""
    store = Store(str(tmp_path / "store"), create=True)
    digest = sealed(store, tmp_path, 0)
    store.move_ref("app", "latest", digest, None)

    def add(node: NodeIdentity, content: bytes, signatures: list[dict[str, str]]) -> str:
        src = tmp_path / f"t-{sha256_digest(content)[7:19]}"
        src.write_bytes(content)
        blob, size = store.put_file(src)
        trace = FileRecord("neuron/precompile_cache/k/trace.bin", blob, size)
        name, data = seal_addition(
            addition_statement("app", digest, "precompile-cache", node, [trace]), None
        )
        store.put_addition(
            digest, name, canonical_json({**json.loads(data), "signatures": signatures})
        )
        return name

    later = NodeIdentity(NODE.target, NODE.installed, "node-b", "2026-12-07T10:00:00Z")
    other = NodeIdentity(NODE.target, {"vllm-neuron": "0.29.0.1.2.1"}, "node-c", NODE.captured)
    old, new = add(NODE, b"first", []), add(later, b"second", [])
    signed, elsewhere = add(NODE, b"signed", [SIG]), add(other, b"other", [])
    collect_garbage(store, now=LATER)
    assert set(store.get_additions(digest)) == {new, signed, elsewhere}
    assert old not in store.get_additions(digest)


def test_a_copy_skips_an_addition_it_cannot_carry_and_the_manifest_stands(tmp_path: Path) -> None:
    shared = Store(str(tmp_path / "shared"), create=True)
    digest = sealed(shared, tmp_path, 0)
    ghost = FileRecord("neuron/precompile_cache/k/trace.bin", "sha256:" + "f" * 64, 3)
    name, data = seal_addition(
        addition_statement("app", digest, "precompile-cache", NODE, [ghost]), None
    )
    shared.put_addition(digest, name, data)  # names a blob the store lacks
    node = Store(str(tmp_path / "node"), create=True)
    report = copy_manifest(shared, node, digest)
    assert node.has_manifest(digest) and node.get_additions(digest) == {}
    assert any("addition not copied" in note for note in report.notes), report.notes
    # A node's read-through fill carries no addition at all: serve fetches the one it lays out.
    again = Store(str(tmp_path / "again"), create=True)
    carried, _ = added(shared, tmp_path, digest, b"a carried trace")
    copy_manifest(shared, again, digest, additions=False)
    assert again.get_additions(digest) == {} and carried in shared.get_additions(digest)


HERE = ("trn2", dict(NODE.installed))


def test_serve_lays_the_chosen_addition_out_keeps_the_nodes_own_files_and_notes_it(
    tmp_path: Path,
) -> None:
    """:func:`add_to_layout` in-process (the end-to-end case runs it under a real start): the
    addition's files verified into the layout root, a file the node wrote itself kept, and a
    note naming what was laid out; one whose blob is gone is a note, not a failure."""
    store = Store(str(tmp_path / "store"), create=True)
    digest = sealed(store, tmp_path, 0)
    name, trace = added(store, tmp_path, digest, b"a trace")
    root = tmp_path / "node"
    tiers = TieredStore(store)
    laid, notes = add_to_layout(
        tiers, root, digest, {"neuron/compile_cache/e/g.neff"}, "precompile-cache", HERE, None
    )
    assert laid == name and (root / trace.path).read_bytes() == b"a trace"
    assert notes == [
        f"laid out addition {name[:19]} (precompile-cache, 1 file of 1, 7 B; captured on "
        f"node-a at {NODE.captured})"
    ]
    (root / trace.path).write_bytes(b"its own")
    dead = (root / trace.path).with_name(f".trace.bin.{'a' * 32}.part")  # a killed serve's
    dead.write_bytes(b"half")
    laid, notes = add_to_layout(tiers, root, digest, set(), "precompile-cache", HERE, None)
    assert not dead.exists()
    assert (root / trace.path).read_bytes() == b"its own" and "0 files of 1" in notes[0]
    (root / trace.path).unlink()
    store.delete_blob(trace)
    laid, notes = add_to_layout(tiers, root, digest, set(), "precompile-cache", HERE, None)
    assert laid is None and notes[-1].startswith(f"addition {name[:19]}: ")
    assert notes[-1].endswith("; not laid out") and not (root / trace.path).exists()


def test_a_full_disk_laying_an_addition_out_is_the_nodes_condition_and_a_refusal_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from neuronbuild.errors import NoRoom
    from neuronbuild.node import additions as node_additions

    store = Store(str(tmp_path / "store"), create=True)
    digest = sealed(store, tmp_path, 0)
    name, _ = added(store, tmp_path, digest, b"a trace")
    root, tiers = tmp_path / "node", TieredStore(store)

    def full(*args: object, **kw: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(root))

    monkeypatch.setattr(node_additions, "place", full)
    with pytest.raises(NoRoom, match="cannot lay out an addition: No space left on device"):
        add_to_layout(tiers, root, digest, set(), "precompile-cache", HERE, None)

    def refused(*args: object, **kw: object) -> None:
        raise OSError(errno.EACCES, "Permission denied", str(root))

    monkeypatch.setattr(node_additions, "place", refused)
    laid, notes = add_to_layout(tiers, root, digest, set(), "precompile-cache", HERE, None)
    assert laid is None and notes == [f"addition {name[:19]}: [Errno 13] Permission denied: "
                                      f"'{root}'; not laid out"]  # fmt: skip


def test_serve_passes_its_policy_to_the_choice(tmp_path: Path) -> None:
    from neuronbuild.attest.policy import load_policy
    from tests.lib.keys import write_key, write_policy

    store = Store(str(tmp_path / "store"), create=True)
    digest = sealed(store, tmp_path, 0)
    added(store, tmp_path, digest, b"an unsigned trace")
    ci, node = write_key(tmp_path / "ci.key"), write_key(tmp_path / "node.key")
    policy = load_policy(
        write_policy(
            tmp_path / "p.yaml", {"ci": [ci], "nodes": [node]}, [("**", ["ci"])],
            {"precompile-cache": ["nodes"]},
        )
    )  # fmt: skip
    root = tmp_path / "node"
    laid, [note] = add_to_layout(
        TieredStore(store), root, digest, set(), "precompile-cache", HERE, policy
    )
    assert laid is None and "found it is unsigned" in note and not root.exists()
