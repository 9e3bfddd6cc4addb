"""The process the ``neuron`` engine runs per phase unit: build vLLM's engine with the recipe's
exact engine arguments under vLLM-Neuron's CPU compile mode, which compiles the unit's phase into
``$VLLM_CACHE_ROOT/neuron/compile_cache/``, then exit.

Run as ``python -m neuronbuild.engines.neuron_compile_worker ARGS_JSON`` with the environment
:class:`~neuronbuild.engines.neuron_compile.NeuronCompiler` sets (``VLLM_NEURON_CPU_COMPILE=1``,
``NEURON_PLATFORM_TARGET_OVERRIDE`` present from the start, before any Neuron import).

vLLM-Neuron returns from ``compile_or_warm_up_model`` after compiling and vLLM carries on starting
the engine (no code path exits: contract section 2, "How a run ends"), so once ``LLM(...)`` has
returned the worker leaves with ``os._exit``: vLLM's engine processes are not asked to shut down
cleanly, they are ended with the process group by the scheduler.
"""

from __future__ import annotations

import json
import os
import sys

DONE = "neuronbuild: vLLM-Neuron compile finished"
"""The line the worker prints once the engine is built (every graph of the phase compiled)."""


def main(argv: list[str]) -> int:
    engine_args = json.loads(argv[0])
    from vllm import LLM

    LLM(**engine_args)
    print(DONE, flush=True)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
