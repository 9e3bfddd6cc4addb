"""Neuron SDK releases as rows: each release of the table plans by its own rules (2.32's
``vision_neuron_config``, 0.29's ``encoder_neuron_config`` and ``VLLM_NEURON_BACKEND`` routes, 2.34's
LoRA), keys its runtime distribution, and an unknown release gets the nearest release's rules with
one warning. The end-to-end cases run the double installed as Neuron 2.33.1 and 2.34.0
(``tests/neuron_double.install``)."""

from __future__ import annotations

import copy
import importlib
import json
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.engines.neuron import releases
from neuronbuild.engines.registry import get_engine
from neuronbuild.errors import RecipeInvalid, UserError
from neuronbuild.keys import explain_differences
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
from neuronbuild_runtime.capture import capture
from neuronbuild_runtime.conformance import run_kit
from neuronbuild_runtime.serve import ServeSource, prepare
from tests.conftest import NEURON_TOOLCHAIN, neuron_recipe
from tests.engines.test_neuron_engine import (
    compile_small,
    compiled_graphs,
    planned,
    setenv,
    small_recipe,
)
from tests.engines.test_neuron_phases import serve_and_count
from tests.neuron_double import INSTALLS, install

PINS = {"2.32.0": NEURON_TOOLCHAIN, **INSTALLS}
"""What a recipe pins for each release the tests install."""


def recipe_for(release: str, **args: Any) -> dict[str, Any]:
    return neuron_recipe(toolchain=dict(PINS[release]), **args)


def errors_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(RecipeInvalid) as info:
        parse_recipe(data)
    return [str(e) for e in info.value.errors]


def toolchain_warnings(data: dict[str, Any]) -> list[str]:
    return [w for w in parse_recipe(data).warnings if "toolchain" in w]


def key(data: dict[str, Any], environ: dict[str, str] | None = None) -> set[str]:
    return {u.key.digest for u in build_plan(parse_recipe(data), environ or {}).units}


def pins_of(release: releases.Release) -> dict[str, str]:
    """A recipe's pins for a release of the table (a stand-in where its version is unpublished)."""
    return {d: min(v) if v else "9.9.9" for d, v in release.packages.items()}


@pytest.mark.parametrize("release", [r.name for r in releases.sdk_releases()])
def test_each_release_of_the_table_validates_without_an_unknown_release_warning(
    release: str,
) -> None:
    row = releases.release_named(release)
    data = neuron_recipe(toolchain=pins_of(row))
    assert toolchain_warnings(data) == []
    assert releases.resolve(parse_recipe(data).toolchain).release == row


def test_the_installs_the_double_reports_are_the_releases_they_name() -> None:
    assert {*INSTALLS, "2.32.0"} == {r.name for r in releases.sdk_releases()}
    for release, pins in INSTALLS.items():
        assert releases.identify(pins) == releases.release_named(release)
        assert toolchain_warnings(recipe_for(release)) == []


def test_a_release_of_the_table_is_planned_by_its_rule_set() -> None:
    rules = {r.name: r.rules for r in releases.sdk_releases()}
    assert rules["2.32.0"].encoder_namespace == "vision_neuron_config"
    assert rules["2.33.0"].encoder_namespace == rules["2.34.0"].encoder_namespace
    assert rules["2.33.1"].encoder_namespace == "encoder_neuron_config"
    assert [rules[r].lora for r in ("2.32.0", "2.33.1", "2.34.0")] == [False, False, True]
    assert rules["2.33.0"].route(None) == rules["2.33.0"].route("neuron") == "native"
    assert not rules["2.32.0"].precompile_cache and rules["2.33.1"].precompile_cache


def test_2_33_1_is_told_from_2_33_0_by_its_rebuilt_libtorch_neuronx_lite() -> None:
    pins = dict(INSTALLS["2.33.1"])
    assert releases.identify(pins).name == "2.33.1"  # type: ignore[union-attr]
    pins["libtorch-neuronx-lite"] = "2.12.0.1.0.3000"  # a 2.33.0 build: unpublished, any
    assert releases.identify(pins).name == "2.33.0"  # type: ignore[union-attr]


def test_an_unknown_release_gets_the_nearest_rules_and_exactly_one_warning() -> None:
    pins = {**INSTALLS["2.34.0"], "vllm": "0.30.0", "vllm-neuron": "0.30.0.1.0.0", "nki": "0.9.0"}
    [warning] = toolchain_warnings(neuron_recipe(toolchain=pins))
    assert "0.30.0.1.0.0 is not a Neuron SDK release neuronbuild knows" in warning
    assert "nearest, Neuron 2.34.0" in warning
    # Planned by 2.34's rules: LoRA is accepted, the encoder namespace is 0.29's.
    parse_recipe(neuron_recipe(toolchain=pins, enable_lora=True))
    older = {**NEURON_TOOLCHAIN, "vllm": "0.23.0", "vllm-neuron": "0.23.0.1.0.0"}
    assert "nearest, Neuron 2.31.1" in toolchain_warnings(neuron_recipe(toolchain=older))[0]


def test_an_unknown_release_must_pin_the_distribution_that_compiles() -> None:
    pins = {"vllm": "0.30.0", "vllm-neuron": "0.30.0.1.0.0", "neuronx-cc": "2.30", "nki": "0.9"}
    [error] = errors_of(neuron_recipe(toolchain=pins))
    assert error.startswith("toolchain.libtorch-neuronx-lite: ")
    assert "libtorch-neuronx-lite up to Neuron 2.34, torch-neuronx after" in error
    parse_recipe(neuron_recipe(toolchain={**pins, "torch-neuronx": "2.10.0.3.0"}))


def test_a_plugin_of_the_0_29_generation_the_table_lacks_gets_0_29_rules() -> None:
    """Nearest by the vLLM a plugin runs on (its first three fields), not the whole version."""
    assert releases.nearest("0.29.0.1.0.0").rules.encoder_namespace == "encoder_neuron_config"
    assert releases.nearest("0.25.0.1.0.0").name == "2.32.0"
    assert releases.nearest("0.30.0.1.0.0").name == releases.nearest("garbage").name == "2.34.0"
    assert releases.nearest("0.20.0.1.0.0").name == "2.31.1"


def test_2_34_is_named_only_by_a_newer_plugin_beside_its_published_versions() -> None:
    assert releases.identify(INSTALLS["2.34.0"]) == releases.release_named("2.34.0")
    for plugin in ("0.20.0", "garbage", "0.29.0.1.2.0+abc", "0.29.0.1.1.0"):
        found = releases.identify({**INSTALLS["2.34.0"], "vllm-neuron": plugin})
        assert found is None or found.name != "2.34.0", plugin
    # Its own distributions are still required, each named.
    pins = {d: v for d, v in INSTALLS["2.34.0"].items() if d != "neuronx-cc"}
    [error] = errors_of(neuron_recipe(toolchain=pins))
    assert error.startswith("toolchain.neuronx-cc: ")
    assert "(Neuron 2.34.0: unpublished); pin the one installed" in error


def test_vllm_must_be_the_one_its_plugin_runs_on() -> None:
    pins = {**INSTALLS["2.34.0"], "vllm": "0.24.0"}
    [error] = errors_of(neuron_recipe(toolchain=pins))
    assert error.startswith('toolchain.vllm="0.24.0": vllm-neuron 0.29.0.2.0.0 runs on vLLM 0.29.0')
    # A release that publishes its vLLM says so once, not once per rule.
    [error] = errors_of(neuron_recipe(toolchain={**INSTALLS["2.33.1"], "vllm": "0.24.0"}))
    assert error.startswith('toolchain.vllm="0.24.0": vllm-neuron 0.29.0.1.2.0 runs on vLLM 0.29.0')


def test_a_pin_of_another_build_names_the_builds_the_release_ships() -> None:
    pins = {**NEURON_TOOLCHAIN, "libtorch-neuronx-lite": "2.13.0.1.0.4089"}
    [error] = errors_of(neuron_recipe(toolchain=pins))
    assert error == (
        'toolchain.libtorch-neuronx-lite="2.13.0.1.0.4089": Neuron 2.32.0 (vllm-neuron '
        "0.24.0.1.1.0) runs with libtorch-neuronx-lite 2.11.0.1.0.1284 or 2.12.0.1.0.1284; pin that"
    )


def test_a_missing_runtime_pin_names_every_release_of_that_plugin() -> None:
    pins = {d: v for d, v in INSTALLS["2.33.1"].items() if d != "libtorch-neuronx-lite"}
    [error] = errors_of(neuron_recipe(toolchain=pins))
    assert error.endswith(
        ": vllm-neuron 0.29.0.1.2.0 runs with libtorch-neuronx-lite (Neuron 2.33.1: "
        "2.11.0.1.0.4089 or 2.12.0.1.0.4089 or 2.13.0.1.0.4089; Neuron 2.33.0: unpublished); pin "
        "the one installed"
    )


def test_without_a_plugin_pin_no_release_rule_is_guessed() -> None:
    toolchain = {d: v for d, v in NEURON_TOOLCHAIN.items() if d != "vllm-neuron"}
    data = multimodal("2.32.0", "vision_neuron_config", enable_lora=True)
    data["toolchain"] = toolchain
    [error] = errors_of(data)
    assert error.startswith("toolchain={") and "must pin vllm-neuron to exact versions" in error


@pytest.mark.parametrize("value", ["abc", 0, -3, 2.5, True])
def test_lora_slot_sizes_must_be_positive_integers(value: object) -> None:
    unshipped = {**INSTALLS["2.34.0"], "vllm": "0.30.0", "vllm-neuron": "0.30.0.1.0.0"}
    for name in ("max_loras", "max_lora_rank"):
        # No table of vLLM 0.30.0 ships: the engine's own rule is the check.
        [error] = errors_of(neuron_recipe(toolchain=unshipped, enable_lora=True, **{name: value}))
        assert error.startswith(f"{name}=") and "must be a positive integer" in error
        # vLLM 0.29.0's table judges the value first: still one line for the field.
        [error] = errors_of(recipe_for("2.34.0", enable_lora=True, **{name: value}))
        assert error.startswith(f"{name}=")


def test_a_known_release_must_pin_its_runtime_and_an_upgrade_of_it_is_another_key() -> None:
    pins = {d: v for d, v in INSTALLS["2.33.1"].items() if d != "libtorch-neuronx-lite"}
    [error] = errors_of(neuron_recipe(toolchain=pins))
    assert error.startswith("toolchain.libtorch-neuronx-lite: ")
    first = key(recipe_for("2.33.1"))
    upgraded = dict(INSTALLS["2.33.1"], **{"libtorch-neuronx-lite": "2.13.0.1.0.4089"})
    assert key(neuron_recipe(toolchain=upgraded)).isdisjoint(first)


def test_the_runtime_distribution_comes_from_the_row_not_the_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A release whose plugin compiles through torch-neuronx (2.35, per the libtorch-neuronx-lite
    end-of-support announcement) is one row away."""
    text = (Path(releases.__file__).parent.parent.parent / "data" / releases.TABLE).read_text()
    data = yaml.safe_load(text)
    row = copy.deepcopy(data["release"][0])
    row.update(name="2.35.0", runtime="torch-neuronx")
    row["packages"] = {"vllm": "0.31.0", "vllm-neuron": "0.31.0.1.0.0", "torch-neuronx": "2.15.0"}
    data["release"].insert(0, row)
    table = releases.parse_table(yaml.safe_dump(data))
    monkeypatch.setattr(releases, "sdk_releases", lambda: table)
    pins = {"vllm": "0.31.0", "vllm-neuron": "0.31.0.1.0.0", "neuronx-cc": "2", "nki": "1"}
    [error] = errors_of(neuron_recipe(toolchain=pins))
    assert error.startswith("toolchain.torch-neuronx: ") and "(Neuron 2.35.0: 2.15.0)" in error
    with_lite = {**pins, "torch-neuronx": "2.15.0", "libtorch-neuronx-lite": "2.13.0.1.0.4089"}
    [error] = errors_of(neuron_recipe(toolchain=with_lite))
    assert "ships no libtorch-neuronx-lite" in error
    parse_recipe(neuron_recipe(toolchain={**pins, "torch-neuronx": "2.15.0"}))


@pytest.mark.parametrize(
    "broken",
    [
        lambda d: d["release"][0].update(rules="nope"),
        lambda d: d["release"][0].update(runtime="torch-neuronx"),
        lambda d: d["release"][0].pop("packages"),
        lambda d: d["rules"]["xla"].pop("lora"),
        lambda d: d["rules"]["native"].update(routes={}),
        lambda d: d["release"][0]["packages"].pop("vllm-neuron"),
    ],
)
def test_a_malformed_table_is_one_value_error(broken: Any) -> None:
    text = (Path(releases.__file__).parent.parent.parent / "data" / releases.TABLE).read_text()
    data = yaml.safe_load(text)
    broken(data)
    with pytest.raises(ValueError, match=releases.TABLE):
        releases.parse_table(yaml.safe_dump(data))


def multimodal(release: str, namespace: str, **args: Any) -> dict[str, Any]:
    config = {"neuron_config": {}, namespace: {"num_vision_tokens_buckets": [2048, 4096]}}
    return recipe_for(release, additional_config=config, **args)


def test_each_release_reads_the_encoder_settings_under_its_own_name() -> None:
    plan = build_plan(parse_recipe(multimodal("2.33.1", "encoder_neuron_config")))
    assert [g.kind for g in plan.graphs].count("vision") == 2
    [error] = errors_of(multimodal("2.33.1", "vision_neuron_config"))
    assert error.startswith("additional_config.vision_neuron_config=")
    assert "reads encoder_neuron_config" in error and "rename it" in error
    [error] = errors_of(multimodal("2.32.0", "encoder_neuron_config"))
    assert "reads vision_neuron_config" in error and "did you mean" not in error
    # A bucket rule names the release's namespace.
    bad = multimodal("2.33.1", "encoder_neuron_config")
    bad["additional_config"]["encoder_neuron_config"]["num_vision_tokens_buckets"] = [1024]
    [error] = errors_of(bad)
    assert error.startswith("additional_config.encoder_neuron_config.num_vision_tokens_buckets")


def test_the_compile_route_is_keyed_as_the_route_its_value_selects() -> None:
    data = recipe_for("2.33.1")
    unset = key(data)
    assert key(data, {"VLLM_NEURON_BACKEND": "neuron_native"}) == unset
    assert key(data, {"VLLM_NEURON_BACKEND": "neuron"}) == unset
    assert key(data, {"VLLM_NEURON_BACKEND": "xla"}).isdisjoint(unset)
    # 0.24 publishes no values: every set value is keyed as written.
    old = recipe_for("2.32.0")
    assert key(old, {"VLLM_NEURON_BACKEND": "neuron_native"}).isdisjoint(key(old))


def test_lora_is_planned_as_slot_inputs_for_2_34_only() -> None:
    [error] = errors_of(recipe_for("2.33.1", enable_lora=True))
    assert error.startswith("enable_lora=true: the pinned vLLM Neuron release serves no LoRA")
    plan = build_plan(parse_recipe(recipe_for("2.34.0", enable_lora=True, max_loras=4)), {})
    assert {u.key.factors["lora_slots"]["slots"] for u in plan.units} == {5}
    assert {u.key.factors["lora_slots"]["rank"] for u in plan.units} == {16}
    [why] = explain_differences(["lora_slots.slots"], get_engine("neuron").factor_meanings)
    assert why.startswith("lora_slots: another number of LoRA adapter slots")
    base = key(recipe_for("2.34.0", enable_lora=True))
    assert key(recipe_for("2.34.0", enable_lora=True, max_loras=1, max_lora_rank=16)) == base
    assert key(recipe_for("2.34.0", enable_lora=True, max_lora_rank=32)).isdisjoint(base)
    assert key(recipe_for("2.34.0", enable_lora=True, max_loras=2)).isdisjoint(base)
    # Adapters are runtime inputs: --lora-modules is served, never compiled in.
    served = recipe_for("2.34.0", enable_lora=True, serve={"lora_modules": ["sql=/adapters/sql"]})
    assert key(served) == base
    # Without LoRA the slot sizes shape nothing.
    assert key(recipe_for("2.34.0", max_loras=8)) == key(recipe_for("2.34.0"))


def test_a_release_with_a_precompile_cache_is_served_with_its_route_named() -> None:
    engine = get_engine("neuron")
    env = engine.serve_env("/layout", INSTALLS["2.33.1"])
    assert env["VLLM_NEURON_BACKEND"] == "neuron_native"
    assert "VLLM_NEURON_BACKEND" not in engine.serve_env("/layout", NEURON_TOOLCHAIN)
    # A node that sets the page's value is not told it is replaced: it is the build's route.
    pins = INSTALLS["2.33.1"]
    quiet = engine.env_warnings({"VLLM_NEURON_BACKEND": "neuron_native"}, {}, "trn2", pins)
    assert quiet == []
    [loud] = engine.env_warnings({"VLLM_NEURON_BACKEND": "xla"}, {}, "trn2", pins)
    assert loud.startswith("VLLM_NEURON_BACKEND is replaced by the build's value (unset)")


# End to end, against the double installed as each release.


LATER = ("2.33.1", "2.34.0")
"""The releases the end-to-end cases install the double as: one of each later rule set."""


@pytest.fixture(params=LATER)
def installed(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[str, Path]]:
    """The double installed as a later Neuron release; yields the release and the file the
    double records compiled graphs in."""
    release = str(request.param)
    site = install(release, tmp_path)
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    setenv(monkeypatch, "PYTHONPATH", str(site))
    record = tmp_path / "compiled.txt"
    setenv(monkeypatch, "NEURON_DOUBLE_RECORD", str(record))
    setenv(monkeypatch, "NEURON_DOUBLE_TRACES", str(tmp_path / "traces.txt"))
    setenv(monkeypatch, "NEURON_DOUBLE_HELPERS", str(tmp_path / "helpers.txt"))
    setenv(monkeypatch, "NEURONBUILD_NEURON_COMPILE_GIB", "0.5")
    for name in ("NEURON_DOUBLE_FAIL", "VLLM_NEURON_BACKEND", "TORCH_CACHING_PRECOMPILE"):
        setenv(monkeypatch, name, None)
    yield release, record


def release_recipe(tmp_path: Path, release: str, **args: Any) -> Recipe:
    """:func:`small_recipe` (multimodal) pinned to ``release``, its encoder settings under that
    release's name."""
    return small_recipe(
        tmp_path, toolchain=dict(PINS[release]), encoder="encoder_neuron_config", **args
    )


def compiled_for(tmp_path: Path, release: str, **args: Any) -> tuple[Recipe, Store]:
    """:func:`release_recipe`, compiled by the double into a folder store."""
    recipe = release_recipe(tmp_path, release, **args)
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_small(recipe, store, tmp_path)
    assert report.failed == 0 and report.manifest is not None, report.units
    return recipe, store


def traces(tmp_path: Path) -> Counter[str]:
    """How many graphs the node's starts traced and reused (``NEURON_DOUBLE_TRACES``), emptied."""
    path = tmp_path / "traces.txt"
    if not path.exists():
        return Counter()
    found = Counter(line.split()[0] for line in path.read_text().splitlines())
    path.unlink()
    return found


@pytest.mark.slow
def test_a_multimodal_recipe_of_each_later_release_compiles_every_graph_and_serves_them(
    installed: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release, record = installed
    extra = {"enable_lora": True, "max_loras": 3} if release == "2.34.0" else {}
    recipe, store = compiled_for(tmp_path, release, **extra)
    graphs = len(planned(recipe))
    assert Counter(compiled_graphs(record)) == Counter(planned(recipe)) and graphs == 3 + 4 + 2
    run = serve_and_count(recipe, store, tmp_path / "node", monkeypatch)
    assert run.returncode == 0, run.stderr
    assert f"{graphs} graphs loaded" in run.stdout
    assert traces(tmp_path) == {"traced": graphs}
    # A second start on the same node takes every trace from its Precompile Cache.
    again = serve_and_count(recipe, store, tmp_path / "node", monkeypatch)
    assert again.returncode == 0, again.stderr
    assert traces(tmp_path) == {"reused": graphs}


@pytest.fixture
def built(installed: tuple[str, Path], tmp_path: Path) -> tuple[Recipe, Store]:
    """:func:`compiled_for` the release the double is installed as."""
    return compiled_for(tmp_path, installed[0])


@pytest.mark.slow
def test_a_node_that_turns_the_precompile_cache_off_traces_at_every_start(
    built: tuple[Recipe, Store], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe, store = built
    setenv(monkeypatch, "TORCH_CACHING_PRECOMPILE", "0")  # the node's own choice, passed through
    for _ in range(2):
        run = serve_and_count(recipe, store, tmp_path / "node", monkeypatch)
        assert run.returncode == 0, run.stderr
    assert traces(tmp_path) == {"traced": 2 * len(planned(recipe))}


@pytest.mark.slow
def test_the_kit_reports_the_release_the_route_and_the_precompile_cache_on_a_node(
    installed: tuple[str, Path], built: tuple[Recipe, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    release, (recipe, store) = installed[0], built
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn2")
    setenv(monkeypatch, "NEURON_DOUBLE_DEVICE", "trn2")
    _, checks = run_kit(recipe, store.url, "node", timeout=60)
    rows = {c.row: c for c in checks}
    assert rows["R1"].status == "PASS" and rows["R1"].evidence["installed"] == release
    assert rows["R2"].status == "PASS" and rows["R2"].evidence["route"] == "native"
    assert rows["R3"].status == "PASS", rows["R3"]
    written = f"{len(planned(recipe))} files under neuron/precompile_cache"
    assert rows["R3"].evidence == {"on": "yes", "written": written}
    # A node that turns the cache off: skipped, and nothing was written.
    setenv(monkeypatch, "TORCH_CACHING_PRECOMPILE", "0")
    _, checks = run_kit(recipe, store.url, "node", timeout=60)
    r3 = {c.row: c for c in checks}["R3"]
    assert (r3.status, r3.evidence) == ("SKIP", {"on": "no", "written": "0 files"})


@pytest.mark.slow
@pytest.mark.parametrize("installed", ["2.33.1"], indirect=True)
def test_a_build_whose_first_node_captured_its_precompile_cache_is_served_by_a_second_node_with_no_tracing(
    built: tuple[Recipe, Store], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe, store = built
    graphs = len(planned(recipe))
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn2")
    setenv(monkeypatch, "NEURON_DOUBLE_DEVICE", "trn2")
    setenv(monkeypatch, "XDG_CACHE_HOME", str(tmp_path / "xdg"))
    source = ServeSource(recipe=recipe.source)
    # Before any capture, a fresh node traces every graph.
    first = serve_and_count(recipe, store, tmp_path / "node-a", monkeypatch)
    assert first.returncode == 0, first.stderr
    assert traces(tmp_path) == {"traced": graphs}
    # A node that turns the cache off has nothing to give back: one line, nothing published.
    setenv(monkeypatch, "TORCH_CACHING_PRECOMPILE", "0")
    with pytest.raises(UserError, match=r"wrote no precompile-cache .* nothing was published"):
        capture(source, TieredStore(store), timeout=60)
    assert store.get_additions(store.resolve(recipe.name)) == {}
    traces(tmp_path)
    setenv(monkeypatch, "TORCH_CACHING_PRECOMPILE", None)
    captured = capture(source, TieredStore(store), timeout=60)
    assert traces(tmp_path) == {"traced": graphs}  # the capture's own start, on a fresh lay-out
    assert (captured.kind, captured.files) == ("precompile-cache", graphs)
    assert list((tmp_path / "xdg" / "neuronbuild" / "captures").iterdir()) == []
    # Once per build and node identity: another first start captures nothing, starts nothing.
    again = capture(source, TieredStore(store), timeout=60)
    assert again.existing and again.name == captured.name and traces(tmp_path) == Counter()
    record = Path(store.layout.layout_record(captured.manifest)).read_text()
    assert json.loads(record)["root"] == str(tmp_path / "node-a")  # the node's own lay-out
    # A second node lays the addition out and takes every trace from it.
    prepared = prepare(source, TieredStore(store), cache_root=tmp_path / "node-b")
    assert prepared.addition == captured.name
    assert any("laid out addition" in n for n in prepared.notes), prepared.notes
    env = {**prepared.env, "NEURON_DOUBLE_DEVICE": "trn2"}
    run = subprocess.run(prepared.argv, env=env, cwd=prepared.cwd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert traces(tmp_path) == {"reused": graphs}
    # A node that differs from the build, allowed by its operator, lays out no addition.
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn1")
    other = prepare(
        source, TieredStore(store), cache_root=tmp_path / "node-d", allow_mismatch=("target",)
    )
    assert other.addition is None and any("differs from the build" in n for n in other.notes)
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn2")
    # serve --no-additions: the build's own files alone.
    alone = prepare(source, TieredStore(store), cache_root=tmp_path / "node-c", additions=False)
    assert (
        alone.addition is None
        and not (tmp_path / "node-c" / "neuron" / "precompile_cache").exists()
    )
