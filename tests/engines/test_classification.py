"""Every engine argument and environment variable of the pinned vLLM is classified, per engine."""

from __future__ import annotations

import sys

import pytest

from neuronbuild.data.vllm_data import engine_arg_names, server_options
from neuronbuild.engines.arg_classes import OWN_FACTORS
from neuronbuild.engines.env_classes import EnvClass
from neuronbuild.engines.registry import get_engine

ENGINES = ("cpu", "neuron")


@pytest.mark.parametrize("engine_name", ENGINES)
def test_every_engine_argument_is_keyed_or_serving_only_for_every_engine(engine_name: str) -> None:
    engine = get_engine(engine_name)
    unclassified = sorted(
        name
        for name in engine_arg_names() - OWN_FACTORS
        if (name in engine.keyed_args) == (name in engine.serving_only_args)
    )
    assert not unclassified, f"classify these for engine {engine_name}: {unclassified}"
    stale = sorted((engine.keyed_args | engine.serving_only_args) - engine_arg_names())
    assert not stale, f"not engine arguments of the pinned vLLM: {stale}"


NEURON_READS = [
    "NEURON_CACHE_BUCKET",
    "NEURON_CC_FLAGS",
    "NEURON_COMPILED_ARTIFACTS",
    "NEURON_COMPILE_CACHE_URL",
    "NEURON_LIBTORCH_COMPILATION_TIMEOUT",
    "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND",
    "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS",
    "NEURON_LIBTORCH_REMOTE_CACHE",
    "NEURON_PARALLEL_COMPILE",
    "NEURON_PLATFORM_TARGET_OVERRIDE",
    "NEURON_RT_ALLOW_LEGACY_NEFF",
    "VLLM_NEURON_ASSERT_CACHE_HIT",
    "VLLM_NEURON_BACKEND",
    "VLLM_NEURON_COMPILATION_TIMEOUT",
    "VLLM_NEURON_CPU_COMPILE",
    "VLLM_NEURON_CPU_MODE",
    "VLLM_NEURON_DISABLE_NKI_KERNELS",
    "VLLM_NEURON_DISABLE_PARALLEL_TRACE",
    "VLLM_NEURON_DISABLE_WARMUP_COMPILE",
    "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION",
    "VLLM_NEURON_PARALLEL_COMPILE_WORKERS",
    "VLLM_NEURON_PARALLEL_TRACE_WORKERS",
    "VLLM_NEURON_REMOTE_CACHE",
    "VLLM_NEURON_SKIP_DECODE_WARMUP",
    "VLLM_NEURON_SKIP_ENCODER_WARMUP",
    "VLLM_NEURON_SKIP_PREFILL_DECODE_WARMUP",
    "VLLM_NEURON_SKIP_PREFILL_WARMUP",
]
"""Every ``NEURON_*`` / ``VLLM_NEURON_*`` name in /work/shared/reference/vllm-neuron-contract.md
and vllm-neuron-internals.md (grep for both prefixes), less the
prefixes ``NEURON_LIBTORCH_`` and ``VLLM_NEURON_SKIP_`` and ``VLLM_NEURON_GRAPH_NEFF_FILE``, a
module constant, not a variable (contract, entry layout). Independent of the engine's tables."""


def vllm_reads() -> set[str]:
    """Every variable ``vllm.envs`` of the installed vLLM defines (its own table)."""
    vllm_envs = pytest.importorskip("vllm.envs")
    return set(vllm_envs.environment_variables)


@pytest.mark.parametrize("engine_name", ENGINES)
@pytest.mark.slow
def test_every_environment_variable_the_engine_reads_has_a_class(engine_name: str) -> None:
    engine = get_engine(engine_name)
    read = vllm_reads() if engine_name == "cpu" else set(NEURON_READS)  # not the engine's tables
    unclassified = sorted(name for name in read if engine.classify_env(name) is None)
    assert not unclassified, f"classify these for engine {engine_name}: {unclassified}"


def test_frontend_options_of_vllms_server_are_known() -> None:
    for flag in (
        "--chat-template",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "--ssl-keyfile",
        "--uds",
        "--root-path",
        "--uvicorn-log-level",
        "--log-level",
    ):
        assert flag in server_options(), flag


@pytest.mark.parametrize(
    ("engine_name", "variable", "expected"),
    [
        ("cpu", "VLLM_PP_LAYER_PARTITION", EnvClass.KEYED),
        ("cpu", "TORCHINDUCTOR_CACHE_DIR", EnvClass.NODE_LOCAL),
        ("cpu", "TORCHINDUCTOR_FREEZING", EnvClass.KEYED),
        ("cpu", "VLLM_LORA_RESOLVER_CACHE_DIR", EnvClass.DROPPED),
        ("cpu", "VLLM_DISABLE_COMPILE_CACHE", EnvClass.REFUSED_AT_SERVE),
        ("cpu", "VLLM_LOGGING_LEVEL", EnvClass.NODE_LOCAL),
        ("neuron", "NEURON_LOGICAL_NC_CONFIG", EnvClass.KEYED),
        ("neuron", "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION", EnvClass.KEYED),
        ("neuron", "NEURON_PLATFORM_TARGET_OVERRIDE", EnvClass.REFUSED_AT_SERVE),
        ("neuron", "VLLM_NEURON_CPU_COMPILE", EnvClass.REFUSED_AT_SERVE),
        ("neuron", "NEURON_LIBTORCH_DISABLE_COMPILE_CACHE", EnvClass.REFUSED_AT_SERVE),
        ("neuron", "NEURON_RT_ALLOW_LEGACY_NEFF", EnvClass.REFUSED_AT_SERVE),
        ("neuron", "NEURON_RT_VISIBLE_CORES", EnvClass.NODE_LOCAL),
    ],
)
def test_the_issues_examples_have_their_class(
    engine_name: str, variable: str, expected: EnvClass
) -> None:
    assert get_engine(engine_name).classify_env(variable) is expected


def test_a_dropped_variable_is_named_not_silently_lost() -> None:
    engine = get_engine("cpu")
    environ = {"VLLM_NCCL_SO_PATH": "/x.so", "VLLM_DISABLE_COMPILE_CACHE": "1", "PATH": "/bin"}
    assert engine.removed_env(environ) == ["VLLM_DISABLE_COMPILE_CACHE", "VLLM_NCCL_SO_PATH"]
    assert engine.engine_env(environ, {}) == {"PATH": "/bin"}
    assert engine.refused_at_serve(environ) == ["VLLM_DISABLE_COMPILE_CACHE"]


@pytest.mark.vllm
def test_the_checked_in_vllm_tables_are_what_the_installed_vllm_gives() -> None:
    from neuronbuild.data import regen as regen_vllm_data

    assert regen_vllm_data.main(["--check"]) == 0, "run python -m neuronbuild.data.regen"
    assert sys.modules["vllm"]
