"""Every environment variable neuronbuild reads or sets, in one place, read lazily.

Following vLLM-Neuron's ``envs.py``: other modules name a variable through this module, so a search
here shows everything that can change neuronbuild's behaviour.
"""

from __future__ import annotations

import os
from pathlib import Path

# Read by neuronbuild.
NEURONBUILD_CACHE = "NEURONBUILD_CACHE"
"""Default store URL when ``--cache`` is not given."""
NEURONBUILD_S3_READ_TIMEOUT = "NEURONBUILD_S3_READ_TIMEOUT"
"""Seconds an S3 read may take before it is retried (default 20)."""
NEURONBUILD_VLLM_COMPAT = "NEURONBUILD_VLLM_COMPAT"
"""``0`` turns off the vLLM compatibility plugin (``neuronbuild_runtime.vllm_compat``)."""

# Set by neuronbuild for vLLM (names as vLLM and vLLM-Neuron spell them).
VLLM_CACHE_ROOT = "VLLM_CACHE_ROOT"
VLLM_FORCE_AOT_LOAD = "VLLM_FORCE_AOT_LOAD"
VLLM_NEURON_DISABLE_WARMUP_COMPILE = "VLLM_NEURON_DISABLE_WARMUP_COMPILE"
NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND = "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND"
VLLM_CPU_KVCACHE_SPACE = "VLLM_CPU_KVCACHE_SPACE"
VLLM_LOGGING_LEVEL = "VLLM_LOGGING_LEVEL"
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"

# The neuron engine's compile mode (vllm-neuron/docs/design/compilation/cpu_compilation.md).
NEURONBUILD_NEURON_COMPILE_GIB = "NEURONBUILD_NEURON_COMPILE_GIB"
"""Host memory (GiB) one neuronx-cc process may take; sizes compile parallelism (default 8)."""
VLLM_NEURON_CPU_COMPILE = "VLLM_NEURON_CPU_COMPILE"
NEURON_PLATFORM_TARGET_OVERRIDE = "NEURON_PLATFORM_TARGET_OVERRIDE"
NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS = "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS"
VLLM_NEURON_SKIP_WARMUP = {
    "prefill": "VLLM_NEURON_SKIP_PREFILL_WARMUP",
    "decode": "VLLM_NEURON_SKIP_DECODE_WARMUP",
    "vision": "VLLM_NEURON_SKIP_ENCODER_WARMUP",
}
"""The switch that leaves each phase out of a vLLM-Neuron run (its graphs' keys unchanged)."""
VLLM_NEURON_SKIP_PREFILL_DECODE_WARMUP = "VLLM_NEURON_SKIP_PREFILL_DECODE_WARMUP"


def _user_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "neuronbuild"


def default_log_dir(name: str) -> Path:
    """Where ``compile`` keeps per-unit logs of recipe ``name`` by default."""
    return _user_cache() / "logs" / name


def default_cache_url() -> str:
    """``$NEURONBUILD_CACHE``, else ``$XDG_CACHE_HOME/neuronbuild/store`` (``~/.cache`` default)."""
    if value := os.environ.get(NEURONBUILD_CACHE):
        return value
    return str(_user_cache() / "store")
