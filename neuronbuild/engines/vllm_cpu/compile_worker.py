"""The process the ``cpu`` engine runs per unit: build a ``vllm.LLM`` with the recipe's exact engine
arguments, which compiles the model into ``$VLLM_CACHE_ROOT``, then exit.

Run as ``python -m neuronbuild.engines.vllm_cpu.compile_worker ARGS_JSON``. vLLM spawns
processes, so the work sits under a ``__main__`` guard (cpu-engine-facts.md).
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    engine_args = json.loads(argv[0])
    from vllm import LLM

    llm = LLM(**engine_args)
    del llm
    print("neuronbuild: engine built; compile cache written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
