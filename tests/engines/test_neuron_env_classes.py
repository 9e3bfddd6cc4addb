"""Every variable of the plugin classified (issue 18 item 7 and the ASSERT_CACHE_HIT part of item 6;
fidelity rows B8, B11, C6): names read from vllm_neuron/envs.py in two forks, unknown names in the
plugin's prefixes keyed, values normalised as the plugin reads them, and the compile and serve runs
of the double honouring them."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from neuronbuild.engines.env_classes import EnvClass
from neuronbuild.engines.registry import get_engine
from neuronbuild.orchestrate.compile import compile_recipe
from neuronbuild.plan import build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
from neuronbuild_runtime.serve import ServeSource, prepare
from tests.conftest import neuron_recipe
from tests.engines.test_neuron_engine import (  # noqa: F401 (the fixture)
    compiled_graphs,
    double,
    planned,
    setenv,
    small_recipe,
)

ENVS_PY = {
    # AWShtokoyo/vllm-neuron @eabd4c9f vllm_neuron/envs.py environment_variables
    "VLLM_NEURON_CPU_MODE": EnvClass.REFUSED_AT_SERVE,
    "VLLM_NEURON_CPU_COMPILE": EnvClass.REFUSED_AT_SERVE,
    "VLLM_NEURON_DISABLE_GRAPH_CAPTURE_BACKEND": EnvClass.DROPPED,
    "VLLM_NEURON_LOG_LEVEL": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_DEBUG_MODE": EnvClass.KEYED,
    "VLLM_NEURON_DISABLE_COMPILE_CACHE": EnvClass.REFUSED_AT_SERVE,
    "VLLM_NEURON_COMPILATION_TIMEOUT": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_BARRIER_TIMEOUT": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_PARALLEL_COMPILE_WORKERS": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_PARALLEL_TRACE_WORKERS": EnvClass.NODE_LOCAL,  # row A11: the fork pool's size
    "VLLM_NEURON_DISABLE_PARALLEL_TRACE": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_MIN_KV_BUDGET_GIB": EnvClass.KEYED,
    "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION": EnvClass.KEYED,
    "VLLM_NEURON_CHECKPOINT_CACHE": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_GOLDEN_CACHE_DIR": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_S3_GOLDENS_URI": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_SWITCH_CC": EnvClass.KEYED,
    "VLLM_NEURON_REMOTE_CACHE": EnvClass.DROPPED,
    "VLLM_NEURON_WORKER_TERMINATION_TIMEOUT": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_DISABLE_WARMUP_COMPILE": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_ASSERT_CACHE_HIT": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_DISABLE_NKI_KERNELS": EnvClass.KEYED,
    "VLLM_NEURON_KERNEL_DEVICE_DUMP": EnvClass.KEYED,
    "VLLM_NEURON_SKIP_PREFILL_WARMUP": EnvClass.DROPPED,
    "VLLM_NEURON_SKIP_DECODE_WARMUP": EnvClass.DROPPED,
    "VLLM_NEURON_LIBTORCH_NEURONX_LITE": EnvClass.KEYED,
    "VLLM_NEURON_EFA_INSTANCE_FAMILY": EnvClass.KEYED,
    "VLLM_NEURON_DISABLE_INPUT_DEDUP": EnvClass.KEYED,
    # jinhuang12/vllm-neuron @0bae3e9c (LNL era) adds
    "VLLM_NEURON_EPD_RENDERER_WORKERS": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_DEVICE_GRAPH_RESERVE_GIB": EnvClass.KEYED,
    "VLLM_NEURON_SKIP_PREFILL_DECODE_WARMUP": EnvClass.DROPPED,
    "VLLM_NEURON_SKIP_ENCODER_WARMUP": EnvClass.DROPPED,
    "VLLM_NEURON_NEFF_LOAD_WAVE_SIZE": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_NEFF_LOAD_SIGNAL_DIR": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_NEFF_LOAD_WAIT_TIMEOUT": EnvClass.NODE_LOCAL,
    "VLLM_NEURON_GC_POLICY": EnvClass.NODE_LOCAL,
    # libtorch-neuronx-lite (SDK 2.32 docs, kiln)
    "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS": EnvClass.NODE_LOCAL,
    "NEURON_LIBTORCH_COMPILATION_TIMEOUT": EnvClass.NODE_LOCAL,
    "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND": EnvClass.NODE_LOCAL,
    "NEURON_LIBTORCH_REMOTE_CACHE": EnvClass.DROPPED,
    "NEURON_LIBTORCH_DISABLE_COMPILE_CACHE": EnvClass.REFUSED_AT_SERVE,
    "NEURON_LIBTORCH_CACHE_ROOT": EnvClass.NODE_LOCAL,
    "NEURON_LIBTORCH_ASSERT_CACHE_HIT": EnvClass.NODE_LOCAL,
}
"""Every name the plugin's envs.py and libtorch-neuronx-lite's docs define, with its class."""


def test_every_variable_of_the_plugin_has_its_class() -> None:
    engine = get_engine("neuron")
    assert {name: engine.classify_env(name) for name in ENVS_PY} == ENVS_PY


@pytest.mark.parametrize(
    ("name", "env_class"),
    [
        ("VLLM_NEURON_GLM5NEXT_ON_DEVICE_SAMPLING", EnvClass.KEYED),  # a fork's graph switch
        ("NEURON_LIBTORCH_SOMETHING_NEW", EnvClass.KEYED),
        ("VLLM_NEURON_SHADOW_DRAFT_LOG_DIR", EnvClass.DROPPED),  # a path: never keyed
        ("NEURON_LIBTORCH_TRACE_ROOT", EnvClass.DROPPED),
    ],
)
def test_an_unknown_name_in_the_plugin_prefixes_is_keyed_never_passed_through(
    name: str, env_class: EnvClass
) -> None:
    engine = get_engine("neuron")
    assert engine.classify_env(name) is env_class
    assert name not in engine.engine_env({name: "1"}, {})


def keyed_env(environ: dict[str, str], target: str = "trn2") -> dict[str, str]:
    recipe = parse_recipe(neuron_recipe(target=target))
    return dict(build_plan(recipe, environ).units[0].key.factors["env"])


def test_values_the_plugin_reads_alike_give_one_key() -> None:
    assert keyed_env({}) == keyed_env({"NEURON_LOGICAL_NC_CONFIG": "2"}) == {}  # trn2's default
    assert keyed_env({"NEURON_LOGICAL_NC_CONFIG": "1"}) == {"NEURON_LOGICAL_NC_CONFIG": "1"}
    assert keyed_env({"NEURON_LOGICAL_NC_CONFIG": "1"}, "trn1") == {}  # trn1's only value
    assert keyed_env({"VLLM_NEURON_DISABLE_INPUT_DEDUP": "0"}) == {}  # bool(int("0")): off
    on = {"VLLM_NEURON_DISABLE_INPUT_DEDUP": "1"}
    assert keyed_env({"VLLM_NEURON_DISABLE_INPUT_DEDUP": "01"}) == keyed_env(on) == on
    assert keyed_env({"NEURON_LOGICAL_NC_CONFIG": " 01"}) == {"NEURON_LOGICAL_NC_CONFIG": "1"}
    superscript = {"NEURON_LOGICAL_NC_CONFIG": "\u00b2"}  # isdigit() says yes, int() says no
    assert keyed_env(superscript) == superscript
    cap = "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION"
    assert keyed_env({cap: "0.30"}) == keyed_env({cap: "3e-1"}) == {}  # the plugin's default
    assert keyed_env({cap: "0.350"}) == keyed_env({cap: " .35"}) == {cap: "0.35"}
    assert keyed_env({cap: "a third"}) == {cap: "a third"}  # the plugin's to refuse


@pytest.mark.parametrize(
    ("spellings", "keyed"),
    [
        (["-O1", "-O 1", "-O=1", "--optlevel=1", "  --optlevel   1 "], "--optlevel=1"),
        (["-lnc 2", "-lnc=2", "--lnc=2", "--logical-nc-config 2"], "--logical-nc-config=2"),
        (
            [
                "--auto-cast none -O2 --enable-saturate-infinity",
                "--auto-cast=none\t-O2 --enable-saturate-infinity",
            ],
            "--auto-cast=none --optlevel=2 --enable-saturate-infinity",
        ),
        (["", "  "], None),
    ],
)
def test_equivalent_spellings_of_compiler_flags_give_one_key(
    spellings: list[str], keyed: str | None
) -> None:
    """Issue 46 item 9: neuronx-cc's argparse reads these alike (its CLI reference's aliases)."""
    expected = {} if keyed is None else {"NEURON_CC_FLAGS": keyed}
    for spelling in spellings:
        assert keyed_env({"NEURON_CC_FLAGS": spelling}) == expected


@pytest.mark.parametrize(
    "flags",
    ["-O1 -O2", "-O2 -O1", "--tensorizer-options='--a --b'", "1 -O1", "--optl=1"],
)
def test_compiler_flags_that_cannot_be_normalised_stay_keys_of_their_own(flags: str) -> None:
    """Order (an option given twice), quoting and abbreviations: keyed as written, or in the
    order given, never merged with another spelling."""
    keyed = keyed_env({"NEURON_CC_FLAGS": flags})["NEURON_CC_FLAGS"]
    assert keyed != keyed_env({"NEURON_CC_FLAGS": "--optlevel=1"})["NEURON_CC_FLAGS"]


@pytest.mark.slow
def test_compile_pins_the_cache_roots_and_strips_assert_cache_hit(
    double: Path,  # noqa: F811 (the imported fixture)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows B8 and C6: a user's NEURON_LIBTORCH_CACHE_ROOT would divert the double's entries from
    the scratch cache, and NEURON_LIBTORCH_ASSERT_CACHE_HIT would make every graph a fatal miss."""
    elsewhere = tmp_path / "elsewhere"
    setenv(monkeypatch, "NEURON_LIBTORCH_CACHE_ROOT", str(elsewhere))
    setenv(monkeypatch, "NEURON_LIBTORCH_ASSERT_CACHE_HIT", "1")
    recipe = small_recipe(tmp_path, vision=False)
    plan = build_plan(recipe)
    command = plan.engine.compiler().command(recipe, plan.units[0], tmp_path / "scratch")
    assert command.env["NEURON_LIBTORCH_CACHE_ROOT"] == str(tmp_path / "scratch")
    assert "NEURON_LIBTORCH_ASSERT_CACHE_HIT" not in command.env
    stream = io.StringIO()
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_recipe(
        recipe, store, stream=stream, jobs=2, timeout=60.0, log_dir=tmp_path / "logs"
    )
    assert report.failed == 0 and report.manifest is not None, stream.getvalue()
    assert sorted(compiled_graphs(double)) == sorted(planned(recipe))
    assert not elsewhere.exists()
    root = tmp_path / "serve-cache"
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn2")
    setenv(monkeypatch, "NEURON_LIBTORCH_ASSERT_CACHE_HIT", None)  # serve sets it itself
    prepared = prepare(ServeSource(recipe=recipe.source), TieredStore(store), cache_root=root)
    assert prepared.env["NEURON_LIBTORCH_CACHE_ROOT"] == str(root)
    assert prepared.env["NEURON_LIBTORCH_ASSERT_CACHE_HIT"] == "1"


@pytest.mark.slow
def test_a_graph_changing_switch_set_at_compile_is_what_serve_runs_with(
    double: Path,  # noqa: F811 (the imported fixture)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Row B11: VLLM_NEURON_DISABLE_INPUT_DEDUP changes the HLO; a node without it (or with the
    LNC spelled as trn2's default) still hits every graph, because serve sets the build's value."""
    setenv(monkeypatch, "VLLM_NEURON_DISABLE_INPUT_DEDUP", "1")
    recipe = small_recipe(tmp_path, vision=False)
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_recipe(
        recipe, store, stream=io.StringIO(), jobs=2, timeout=60.0, log_dir=tmp_path / "logs"
    )
    assert report.manifest is not None
    setenv(monkeypatch, "VLLM_NEURON_DISABLE_INPUT_DEDUP", None)  # the node's own environment
    setenv(monkeypatch, "NEURON_LOGICAL_NC_CONFIG", "2")
    setenv(monkeypatch, "NEURONBUILD_NODE_TARGET", "trn2")
    root = tmp_path / "serve-cache"
    prepared = prepare(ServeSource(recipe=recipe.source), TieredStore(store), cache_root=root)
    assert prepared.env["VLLM_NEURON_DISABLE_INPUT_DEDUP"] == "1"
    env = {**prepared.env, "NEURON_DOUBLE_DEVICE": "trn2"}
    run = subprocess.run(prepared.argv, env=env, cwd=prepared.cwd, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"{len(planned(recipe))} graphs loaded" in run.stdout
