"""The engine protocol: the only backend-specific code (DESIGN.md, "Engines").

An engine answers: how a recipe is checked and expands into compile units (here); how one unit is
compiled in a subprocess and which scratch-cache entries are complete (its compile half, loaded
lazily so the runtime never imports it); and which env + args make vLLM load only prebuilt
artifacts (its serve half).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from neuronbuild.errors import MISSING, RecipeError, UserError
from neuronbuild.graph import Graph

if TYPE_CHECKING:
    from neuronbuild.engines.compiler import UnitCompiler
    from neuronbuild.recipe import Recipe

SERVING_ONLY_ARGS = frozenset(
    {
        "served_model_name",
        "disable_log_stats",
        "aggregate_engine_logging",
        "log_level",
        "log_config_file",
        "logging_config",
        "otlp_traces_endpoint",
        "collect_detailed_traces",
        "show_hidden_metrics_for_version",
        "kv_cache_metrics",
        "kv_cache_metrics_sample",
        "custom_histogram_buckets",
        "cudagraph_metrics",
        "enable_mfu_metrics",
        "enable_logging_iteration_details",
        "enable_mm_processor_stats",
        "per_request_spec_decode_metrics",
        "use_tqdm_on_load",
    }
)
"""vLLM engine arguments that only change logging or naming, never a compiled graph; they stay
out of unit keys."""


@dataclass(frozen=True)
class UnitEstimate:
    """What compiling one unit is expected to take: wall ``seconds``, ``cpus`` (cores kept busy)
    and ``memory_gib`` (peak host memory, GiB). Used to balance shards (largest first) and as
    the per-task resources of the Ray executor."""

    seconds: float
    cpus: float
    memory_gib: float


@dataclass(frozen=True)
class UnitSpec:
    """One compile unit as an engine sees it: its graphs and its engine-specific key factors."""

    graphs: tuple[Graph, ...]
    factors: dict[str, Any] = field(default_factory=dict)


class Engine(ABC):
    """One compile backend (``cpu`` or ``neuron``).

    Subclasses set :attr:`name`, :attr:`key_env` and :attr:`key_env_prefixes` (environment
    variables that change compiler output or vLLM's own keys: part of every unit key, and set
    identically for the engine at compile and at serve), :attr:`required_toolchain`
    (distributions a recipe must pin), :attr:`note` (a line the text plan prints), and the
    estimate of one unit (:meth:`estimate`): :attr:`graph_seconds` per graph it compiles,
    :attr:`unit_cpus` and :attr:`unit_memory_gib`.
    """

    name: ClassVar[str]
    key_env: ClassVar[tuple[str, ...]] = ()
    key_env_prefixes: ClassVar[tuple[str, ...]] = ()
    required_toolchain: ClassVar[tuple[str, ...]] = ()
    note: ClassVar[str] = ""
    graph_seconds: ClassVar[float] = 60.0
    unit_cpus: ClassVar[float] = 1.0
    unit_memory_gib: ClassVar[float] = 4.0

    def validate(self, recipe: Recipe) -> tuple[list[RecipeError], list[str]]:
        """Every error and warning of ``recipe`` for this engine (errors name field, value, fix)."""
        missing = [d for d in self.required_toolchain if d not in recipe.toolchain]
        if not missing:
            return [], []
        example = ", ".join(f"{d}: <version>" for d in self.required_toolchain)
        return [
            RecipeError(
                "toolchain",
                recipe.toolchain or MISSING,
                f"must pin {', '.join(missing)} to exact versions, e.g. {{{example}}}",
            )
        ], []

    @abstractmethod
    def units(self, recipe: Recipe) -> list[UnitSpec]:
        """The compile units of a valid ``recipe``, in compile order."""

    def compiler(self) -> UnitCompiler:
        """This engine's compile half (imported only when compiling).

        Raises:
            UserError: the engine's toolchain cannot be used on this machine.
        """
        raise UserError(f"engine {self.name} cannot compile on this machine")

    def is_key_env(self, name: str) -> bool:
        """Whether environment variable ``name`` belongs in unit keys."""
        return name in self.key_env or name.startswith(self.key_env_prefixes)

    def drops_env(self, name: str) -> bool:
        """Whether an inherited variable must not reach the engine (it would change vLLM's keys
        without being in ours)."""
        return False

    def key_env_values(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The keyed variables set in ``environ``, for a unit key's ``env`` factor."""
        return {k: environ[k] for k in sorted(environ) if self.is_key_env(k)}

    def engine_env(self, environ: Mapping[str, str], keyed: Mapping[str, str]) -> dict[str, str]:
        """The environment of an engine process, at compile and at serve alike: ``environ``
        without keyed or dropped variables, plus exactly the unit's ``keyed`` values."""
        env = {k: v for k, v in environ.items() if not self.is_key_env(k) and not self.drops_env(k)}
        env.update({k: str(v) for k, v in keyed.items() if self.is_key_env(k)})
        return env

    @abstractmethod
    def serve_env(self, cache_root: str) -> dict[str, str]:
        """Variables that make vLLM load only the prebuilt artifacts under ``cache_root`` (the
        ``VLLM_CACHE_ROOT``) and fail at start, never compile, when one is missing."""

    def check_node(self, factors: dict[str, Any]) -> None:
        """Raise UserError when this node cannot run artifacts built with these unit factors."""

    def key_engine_args(self, recipe: Recipe) -> dict[str, Any]:
        """The engine arguments that enter every unit key: all but serving-only ones and the
        model and revision (keyed on their own)."""
        skip = SERVING_ONLY_ARGS | {"model", "revision"}
        return {k: v for k, v in recipe.engine_args.items() if k not in skip}

    def estimate(self, graphs: int) -> UnitEstimate:
        """The expected cost of a unit that compiles ``graphs`` graphs: seconds grow with the
        graphs (compiled one after another in one engine process), cores and memory do not."""
        return UnitEstimate(
            self.graph_seconds * max(1, graphs), self.unit_cpus, self.unit_memory_gib
        )
