"""The conformance kit (``neuronbuild conformance``, issue 18 item 10): every check passes or
skips on a build of the neuron test double, and fails when the double, the store or the product
is made to misbehave where that check looks."""

from __future__ import annotations

import dataclasses
import io
import json
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import psutil
import pytest

from neuronbuild.cli.conformance import exit_code
from neuronbuild.cli.main import cli
from neuronbuild.engines.neuron.conformance import (
    Check,
    StartOutcome,
    check_layout,
    check_nki_paths,
    check_optimization_level,
    check_precompile_cache,
    check_release,
    check_removed_entry,
    check_route,
    check_versions,
    check_whole_start,
)
from neuronbuild.engines.neuron.engine import NeuronEngine
from neuronbuild.engines.neuron.releases import release_named
from neuronbuild.recipe import Recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, Manifest
from neuronbuild.ui.console import run
from neuronbuild_runtime.conformance import run_kit
from tests.engines.test_neuron_engine import compile_small, double, setenv, small_recipe

__all__ = ["double"]  # the fixture, used by name

PREFIX = "neuron/compile_cache"
ENTRY = "0" * 32
MISS_OF = "local compile cache miss for key"
"""The plugin's miss error, before the key (``vllm-neuron-contract.md`` section 3)."""


def entry_files(entry: str = ENTRY, *names: str) -> list[str]:
    names = names or ("graph.hlo", f"graph_{entry}.neff", ".compilation_complete")
    return [f"{PREFIX}/{entry}/{n}" for n in (*names, ".artifact_metadata_v0.json")]


def command_exit(args: list[str], out: io.StringIO) -> int:
    """Run ``neuronbuild ARGS`` in this process (its stdout into ``out``); its exit code."""
    try:
        with redirect_stdout(out):
            run(cli, args)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


def by_row(checks: list[Check]) -> dict[str, Check]:
    return {c.row: c for c in checks}


# The rules, one by one.


def test_a_base_pin_passes_a_labelled_install_and_shows_the_label() -> None:
    check = check_versions({"neuronx-cc": "2.27.5334.0"}, {"neuronx-cc": "2.27.5334.0+f702b353"})
    assert check.status == "PASS"
    assert check.evidence == {"neuronx-cc": "2.27.5334.0+f702b353"}


def test_a_differing_or_missing_install_fails_naming_both_versions() -> None:
    check = check_versions(
        {"neuronx-cc": "2.27.5334.0+f702b353", "nki": "0.6.0"},
        {"neuronx-cc": "2.27.5334.0+0badc0de", "nki": None},
    )
    assert check.status == "FAIL"
    assert "neuronx-cc pinned 2.27.5334.0+f702b353, installed 2.27.5334.0+0badc0de" in check.why
    assert "nki pinned 0.6.0, installed (not installed)" in check.why


def test_an_entry_without_its_marker_or_with_a_foreign_key_fails_the_layout() -> None:
    assert check_layout(entry_files(), PREFIX, {ENTRY: ENTRY}).status == "PASS"
    no_marker = entry_files(ENTRY, "graph.hlo", f"graph_{ENTRY}.neff")
    check = check_layout(no_marker, PREFIX, {})
    assert check.status == "FAIL" and f"incomplete: {ENTRY}" in check.why
    moved = check_layout(entry_files(), PREFIX, {ENTRY: "1" * 32})
    assert moved.status == "FAIL" and "cache_key differs from its folder" in moved.why
    assert check_layout([], PREFIX, {}).status == "FAIL"


def test_an_entry_compiled_at_another_level_fails_and_no_record_skips() -> None:
    assert check_optimization_level(1, {ENTRY: "neuronx-cc -O1 --target=trn2"}).status == "PASS"
    check = check_optimization_level(2, {ENTRY: "neuronx-cc -O1 --target=trn2"})
    assert check.status == "FAIL" and check.evidence == {"expected": "-O2", "seen": "-O1"}
    assert check_optimization_level(1, {ENTRY: "neuronx-cc compile"}).status == "SKIP"


def test_a_kernel_binary_named_but_not_carried_fails_with_its_absolute_path() -> None:
    root = "/var/tmp/nki-intermediate-cache"
    assert check_nki_paths({ENTRY: ["k/a.klir"]}, {"k/a.klir"}, root).status == "PASS"
    check = check_nki_paths({ENTRY: ["k/a.klir", "k/b.klir"]}, {"k/a.klir"}, root)
    assert check.status == "FAIL" and check.why == f"not carried: {root}/k/b.klir"
    assert check_nki_paths({ENTRY: []}, set(), root).status == "SKIP"


@pytest.mark.parametrize(
    ("code", "output", "status"),
    [
        (1, f"RuntimeError: VLLM_NEURON_DISABLE_WARMUP_COMPILE: {MISS_OF} {ENTRY}. All", "PASS"),
        (1, f"RuntimeError: VLLM_NEURON_DISABLE_WARMUP_COMPILE: {MISS_OF} {'1' * 32}.", "FAIL"),
        (0, "server ready", "FAIL"),  # started without the entry
        (None, "compiling graph 3", "FAIL"),  # still running: compiling
        (1, "CUDA out of memory", "FAIL"),  # failed, but for another reason
    ],
)  # The second: a miss, but of another entry than the removed one (issue 42).
def test_only_a_start_that_fails_on_the_miss_passes(
    code: int | None, output: str, status: str
) -> None:
    check = check_removed_entry(StartOutcome(code, output, 2.0, ENTRY))
    assert check.status == status
    assert check.evidence["removed"] == ENTRY


@dataclasses.dataclass(frozen=True)
class Start:
    """A whole build's start, as ``runtime.conformance.WholeStart`` reports one."""

    served: bool = True
    code: int | None = None
    compiled: list[str] = dataclasses.field(default_factory=list)
    output: str = "server ready, 3 graphs loaded from the local compile cache"
    seconds: float = 2.0

    @property
    def tail(self) -> str:
        return self.output.splitlines()[-1]


@pytest.mark.parametrize(
    ("start", "why"),
    [
        (Start(), ""),
        (Start(output="ready"), ""),  # a runtime that does not count its graphs
        (Start(served=False), "it was not ready within the time limit: server ready"),
        (Start(served=False, code=1, output="RuntimeError: x"), "it exited with 1: RuntimeError"),
        (Start(compiled=["neuron/compile_cache/k/graph_k.neff"]), "it compiled at start (1 file"),
        (Start(output="2 graphs loaded"), "it loaded 2 of the 3 planned graphs"),
    ],
)
def test_s0_passes_only_a_start_that_served_compiled_nothing_and_loaded_every_graph(
    start: Start, why: str
) -> None:
    check = check_whole_start(start, planned=3)
    assert check.status == ("PASS" if not why else "FAIL") and check.why.startswith(why), check


GA = {"vllm": "0.29.0", "vllm-neuron": "0.29.0.2.0.0", "neuronx-cc": "2.29.0.0", "nki": "0.8.0"}
BETA = {
    "vllm": "0.29.0",
    "vllm-neuron": "0.29.0.1.2.0",
    "neuronx-cc": "2.28.7631.0",
    "nki": "0.7.0",
}


def test_r1_fails_a_host_of_another_release_and_skips_pins_the_table_lacks() -> None:
    pins = {**GA, "libtorch-neuronx-lite": "2.13.0.1.0.5000"}
    assert check_release(pins, {**pins, "nki": "0.8.0+abc"}).status == "PASS"
    other = check_release(pins, {**BETA, "libtorch-neuronx-lite": "2.12.0.1.0.4089"})
    assert other.status == "FAIL" and other.why == "pinned Neuron 2.34.0, installed 2.33.1"
    unknown = check_release({**pins, "vllm-neuron": "0.31.0.1.0.0", "nki": "1.0"}, pins)
    assert unknown.status == "SKIP" and "planned by Neuron 2.34.0's rules" in unknown.why


def test_r2_judges_the_builds_route_not_the_hosts() -> None:
    rules = release_named("2.33.1").rules
    assert check_route(rules, None, "xla").status == "PASS"  # serve gives the build's value
    assert check_route(rules, None, None).evidence["route"] == "native"
    failed = check_route(rules, "xla", None)
    assert failed.status == "FAIL" and "VLLM_NEURON_BACKEND=xla" in failed.why
    assert check_route(release_named("2.32.0").rules, "xla", None).status == "SKIP"


def test_r3_passes_only_a_start_that_wrote_the_cache_it_turned_on() -> None:
    rules = release_named("2.33.1").rules
    on = {"VLLM_NEURON_BACKEND": "neuron_native"}
    trace = ["neuron/precompile_cache/k/trace.bin"]
    assert check_precompile_cache(rules, on, trace, True, "").status == "PASS"
    assert check_precompile_cache(rules, on, [], True, "").status == "FAIL"
    crashed = check_precompile_cache(rules, on, trace, False, "Traceback: boom")
    assert crashed.status == "FAIL" and crashed.why == "the start did not come up: Traceback: boom"
    for env in ({}, {**on, "TORCH_CACHING_PRECOMPILE": "0"}, {"VLLM_NEURON_BACKEND": " "}):
        assert check_precompile_cache(rules, env, [], True, "").status == "SKIP", env
    assert check_precompile_cache(release_named("2.32.0").rules, on, [], True, "").status == "SKIP"


def test_the_exit_code_is_one_only_when_a_check_failed() -> None:
    assert exit_code([Check("B7", "x", "PASS"), Check("C1", "y", "SKIP", "no device")]) == 0
    assert exit_code([Check("B7", "x", "PASS"), Check("B2", "z", "FAIL", "bad")]) == 1


# Against the double.


@pytest.fixture
def built(double: Path, tmp_path: Path) -> tuple[Recipe, Store]:
    """A small multimodal trn2 recipe compiled by the double into a folder store."""
    recipe = small_recipe(tmp_path)
    store = Store(str(tmp_path / "store"), create=True)
    assert compile_small(recipe, store, tmp_path).manifest is not None
    return recipe, store


@pytest.fixture
def on_node(built: tuple[Recipe, Store], monkeypatch: pytest.MonkeyPatch) -> tuple[Recipe, Store]:
    """``built``, with this process and the double's vLLM taking this host for a trn2 node."""
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn2")
    setenv(monkeypatch, "NEURON_DOUBLE_DEVICE", "trn2")
    return built


def republish(store: Store, recipe: Recipe, keep: object, replace: dict[str, bytes]) -> None:
    """Move ``<name>/latest`` to a copy of its manifest without the files ``keep(path)`` refuses
    and with the bytes of each path in ``replace`` changed (a store that lost or altered them)."""
    digest = store.get_ref(recipe.name, "latest")
    assert digest is not None
    manifest = store.get_manifest(digest)
    units = []
    for unit in manifest.units:
        files = []
        for f in unit.files:
            if not keep(f.path):  # type: ignore[operator]
                continue
            if f.path in replace:
                tmp = Path(tempfile.mkdtemp()) / "replaced"
                tmp.write_bytes(replace[f.path])
                digest_new, size = store.put_file(tmp)
                f = FileRecord(f.path, digest_new, size, f.executable)
            files.append(f)
        units.append(dataclasses.replace(unit, files=tuple(files)))
    new = store.put_manifest(Manifest(manifest.name, manifest.recipe, tuple(units)))
    store.set_ref(recipe.name, "latest", new)


def test_a_compile_host_passes_or_skips_every_row_on_the_doubles_build(
    built: tuple[Recipe, Store],
) -> None:
    recipe, store = built
    _, checks = run_kit(recipe, store.url, "compile", timeout=60)
    rows = by_row(checks)
    assert [c.row for c in checks] == [
        "B12", "R1", "R2", "B2", "B10", "B7", "S0", "C1", "R3", "B15"
    ]  # fmt: skip
    assert {r: c.status for r, c in rows.items()} == {
        "B12": "PASS", "R1": "PASS", "R2": "SKIP", "B2": "PASS", "B10": "PASS", "B7": "PASS",
        "S0": "SKIP", "C1": "SKIP", "R3": "SKIP", "B15": "SKIP",
    }  # fmt: skip
    assert rows["R1"].evidence["installed"] == rows["R1"].evidence["pinned"] == "2.32.0"
    assert rows["R2"].why == "this release publishes no route values"
    assert rows["B12"].evidence["neuronx-cc"] == "2.27.5334.0+f702b353"
    assert rows["B10"].evidence == {"expected": "-O1", "seen": "-O1"}
    assert int(rows["B7"].evidence["named"]) > 0
    assert "--host node" in rows["C1"].why


def test_a_node_passes_when_serve_without_one_entry_fails_on_the_miss(
    on_node: tuple[Recipe, Store],
) -> None:
    recipe, store = on_node
    _, checks = run_kit(recipe, store.url, "node", timeout=60)
    start, c1 = by_row(checks)["S0"], by_row(checks)["C1"]
    assert start.status == "PASS", start
    assert start.evidence["graphs loaded"] == start.evidence["graphs planned"] != "0"
    assert start.evidence["compiled files"] == "0"
    assert c1.status == "PASS", c1
    assert c1.evidence["exit"] != "0"
    assert exit_code(checks) == 0


@pytest.mark.parametrize("broken", ["no vision graph", "other KV blocks"])
def test_a_broken_build_fails_the_kit_before_any_negative_check(
    double: Path, on_node: tuple[Recipe, Store], monkeypatch: pytest.MonkeyPatch, broken: str
) -> None:
    """Issue 42: the kit passed such builds, since C1's start failed on a miss as it should;
    now the whole build must serve first (S0), and C1 is not run. Broken: the vision graph's
    entries left out of the manifest (serve refuses before vLLM starts), or a device whose HBM
    gives the KV cache another block count than the compile's (row B15: every key differs, the
    start fails on a miss)."""
    recipe, store = on_node
    if broken == "other KV blocks":
        setenv(monkeypatch, "NEURON_DOUBLE_DEVICE", "trn3")  # 144 GiB, not trn2's 96
    else:
        vision = {line.rsplit(" ", 1)[1] for line in double.read_text().splitlines()
                  if line.startswith("vision")}  # fmt: skip
        assert vision
        republish(store, recipe, lambda path: not any(f"/{key}/" in path for key in vision), {})
    _, checks = run_kit(recipe, store.url, "node", timeout=60)
    rows = by_row(checks)
    why = "it exited with 1: " if broken == "other KV blocks" else "serve refused this node"
    assert rows["S0"].status == "FAIL" and why in rows["S0"].why, rows["S0"]
    assert rows["C1"].status == "SKIP" and "S0" in rows["C1"].why
    assert exit_code(checks) == 1


def test_a_node_that_compiles_instead_of_failing_fails_c1(
    on_node: tuple[Recipe, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe, store = on_node
    without_never_compile(monkeypatch)
    _, checks = run_kit(recipe, store.url, "node", timeout=60)
    c1 = by_row(checks)["C1"]
    assert c1.status == "FAIL" and c1.why == "serve started without the entry"


def without_never_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the product forget serve's "never compile" switches, so the double compiles a miss."""
    serve_env = NeuronEngine.serve_env

    def compiles(self: NeuronEngine, cache_root: str, toolchain: dict[str, str]) -> dict[str, str]:
        env = serve_env(self, cache_root, toolchain)
        for name in (
            "VLLM_NEURON_DISABLE_WARMUP_COMPILE",
            "NEURON_LIBTORCH_ASSERT_CACHE_HIT",
            "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND",
        ):
            env.pop(name)
        return env

    monkeypatch.setattr(NeuronEngine, "serve_env", compiles)


@pytest.mark.slow
def test_a_node_start_still_compiling_at_the_limit_fails_and_leaves_no_process(
    on_node: tuple[Recipe, Store], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    recipe, store = on_node
    setenv(monkeypatch, "NEURON_DOUBLE_FAIL", "hang")  # a compile that takes an hour
    helpers = tmp_path / "helpers.txt"
    helpers.unlink(missing_ok=True)
    without_never_compile(monkeypatch)
    start = time.monotonic()
    _, checks = run_kit(recipe, store.url, "node", timeout=3)
    assert time.monotonic() - start < 30
    c1 = by_row(checks)["C1"]
    assert c1.status == "FAIL" and c1.evidence["exit"] == "still running", c1
    pids = [int(pid) for pid in helpers.read_text().split()]  # vLLM's engine helpers
    assert len(pids) == 2  # one per start: C1's and R3's
    for helper in pids:
        assert not psutil.pid_exists(helper) or psutil.Process(helper).status() == "zombie"


def test_labels_differing_from_the_pins_fail_b12(
    built: tuple[Recipe, Store], tmp_path: Path
) -> None:
    recipe, store = built
    pinned = dataclasses.replace(recipe, toolchain={**recipe.toolchain, "nki": "0.6.0+0badc0de"})
    _, checks = run_kit(pinned, store.url, "compile", timeout=60)
    b12 = by_row(checks)["B12"]
    assert b12.status == "FAIL" and "installed 0.6.0+31049202112.g85070674" in b12.why


def test_a_store_that_lost_a_marker_a_kernel_binary_or_holds_another_level_fails_its_row(
    built: tuple[Recipe, Store],
) -> None:
    recipe, store = built
    digest = store.get_ref(recipe.name, "latest")
    assert digest is not None
    paths = [f.path for f in store.get_manifest(digest).files()]
    marker = next(p for p in paths if p.endswith("/.compilation_complete"))
    binary = next(p for p in paths if "/.nki-intermediate-cache/" in p)
    command = next(p for p in paths if p.endswith("/command.txt"))
    moved = next(p for p in paths if "artifact_metadata" in p and p.split("/")[2] not in marker)
    text = b"neuronx-cc compile --framework=XLA graph.hlo --auto-cast=none -O2 --target=trn2\n"
    foreign = json.dumps({"cache_key": "f" * 32}).encode()
    republish(store, recipe, lambda p: p not in (marker, binary), {command: text, moved: foreign})
    _, checks = run_kit(recipe, store.url, "compile", timeout=60)
    rows = by_row(checks)
    assert rows["B2"].status == "FAIL" and marker.split("/")[2] in rows["B2"].why
    assert f"cache_key differs from its folder: {moved.split('/')[2]}" in rows["B2"].why
    assert rows["B7"].status == "FAIL" and binary.split("/", 3)[3] in rows["B7"].why
    assert rows["B10"].status == "FAIL" and rows["B10"].evidence["seen"] == "-O1, -O2"
    assert exit_code(checks) == 1


def test_the_command_prints_a_table_and_json_with_the_same_rows(
    built: tuple[Recipe, Store],
) -> None:
    recipe, store = built
    for as_json in (False, True):
        out = io.StringIO()
        args = [
            "conformance",
            recipe.source,
            "--cache",
            store.url,
            *(["--json"] if as_json else []),
        ]
        assert command_exit(args, out) == 0
        if as_json:
            document = json.loads(out.getvalue())
            statuses = [c["status"] for c in document["checks"]]
            assert statuses == ["PASS", "PASS", "SKIP", "PASS", "PASS", "PASS"] + ["SKIP"] * 4
            assert document["host"] == "compile" and document["manifest"].startswith("sha256:")
        else:
            lines = out.getvalue().splitlines()
            assert lines[1].split() == ["ROW", "STATUS", "CHECK"]
            assert lines[2].startswith("B12  PASS")
            assert "      neuronx-cc: 2.27.5334.0+f702b353" in lines


def test_a_cpu_recipe_is_refused_in_one_line(tmp_path: Path) -> None:
    from tests.orchestrate.test_shards import double_recipe, write_recipes

    [path] = write_recipes(tmp_path, [double_recipe("cpu")])
    err = io.StringIO()
    with redirect_stderr(err):
        code = command_exit(
            ["conformance", path, "--cache", str(tmp_path / "store")], io.StringIO()
        )
    assert code == 2
    [line] = err.getvalue().strip().splitlines()
    assert line.endswith(
        ": engine is cpu, which offers no conformance kit; the kit checks recipes of engine "
        "neuron (target trn1, trn2, trn3, inf2)"
    )
