"""Test double of vllm-neuron 0.24.0.1.1.0's plugin registration (S4 ``vllm_neuron/__init__.py``):
the platform is returned in CPU compile mode or when a Neuron device exists, else None."""

from __future__ import annotations

import os


def register() -> str | None:
    cpu_compile = os.environ.get("VLLM_NEURON_CPU_COMPILE", "0") not in ("", "0")
    cpu_mode = os.environ.get("VLLM_NEURON_CPU_MODE", "0") not in ("", "0")
    if cpu_compile and cpu_mode:
        raise RuntimeError(
            "VLLM_NEURON_CPU_MODE and VLLM_NEURON_CPU_COMPILE are not compatible with each other"
        )
    if cpu_compile or os.environ.get("NEURON_DOUBLE_DEVICE"):
        return "vllm_neuron.platform.NeuronPlatform"
    print("No Neuron devices found. Skipping Neuron plugin registration.")
    return None
