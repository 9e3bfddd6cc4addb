"""Issue 41 item 3 in the store: an addition lives while its manifest does, keeps its blobs
alive while it does, and travels with its manifest (push, pull, a node's read-through) so a
pulled node lays it out offline."""

from __future__ import annotations

from pathlib import Path

from neuronbuild.attest.additions import seal_addition
from neuronbuild.store.additions import NodeIdentity, addition_statement
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from neuronbuild.store.records import FileRecord
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
