"""The process the ``cpu`` engine runs per unit: build a ``vllm.LLM`` with the recipe's exact engine
arguments, which compiles the model into ``$VLLM_CACHE_ROOT``, answer one request with logprobs
(what vLLM compiles at a server's first such request), then exit.

Run as ``python -m neuronbuild.engines.vllm_cpu.compile_worker ARGS_JSON``. vLLM spawns
processes, so the work sits under a ``__main__`` guard (cpu-engine-facts.md).
"""

from __future__ import annotations

import json
import sys


def main(argv: list[str]) -> int:
    engine_args = json.loads(argv[0])
    from vllm import LLM, SamplingParams

    from neuronbuild.engines.vllm_cpu.engine import answers_with_logprobs

    llm = LLM(**engine_args)
    # The first request that asks for logprobs makes vLLM compile its sampler's rank helper
    # (torch.compile, into the same Inductor cache as the model's), even with the AOT artifact
    # loaded: measured with vllm-cpu 0.32.0. One such request here puts it in the build, so a
    # node never compiles it (neuronbuild probe asks for logprobs). A model that generates no
    # text with logprobs (a pooling runner, no tokenizer, max_logprobs 0) has nothing to warm.
    if answers_with_logprobs(engine_args):
        params = SamplingParams(max_tokens=2, temperature=0, logprobs=1)
        llm.generate(["The"], params, use_tqdm=False)
    del llm
    print("neuronbuild: engine built; compile cache written", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
