"""Test double of vLLM's CPU build for orchestration tests (never part of the product).

Put on ``PYTHONPATH`` of a ``neuronbuild compile`` process, it stands in for ``vllm`` in the
engine's compile worker: ``LLM(**engine_args)`` writes one complete AOT entry where vLLM's CPU
build writes it (``$VLLM_CACHE_ROOT/torch_compile_cache/torch_aot_compile/<key>/rank_0_0/model``,
written last), with a key derived from the engine arguments, in a fraction of a second.

Knobs (environment): ``CPU_DOUBLE_BUILDS`` a file each build appends one JSON line to (its
engine arguments, process id and parent's), so a test can count builds across processes;
``CPU_DOUBLE_SECONDS`` how long a build takes; ``CPU_DOUBLE_GATE`` a file a build waits for
before it starts (a test holds a build open so); ``CPU_DOUBLE_FAIL_SEQS`` a ``max_num_seqs``
value whose build fails (exit 1 from the worker).

``LLM.generate`` writes ``inductor_cache/rank_helper.so`` into the entry when asked for
logprobs (as vLLM compiles its sampler's rank helper then) and answers each prompt with a JSON
text of what it was given (engine arguments,
prompt, sampling parameters, working folder and the variables the demo's plain run sets), so a
test reads back exactly what reached "vLLM".
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__version__ = "0.32.0"


@dataclass
class SamplingParams:
    temperature: float = 1.0
    max_tokens: int = 16
    logprobs: int | None = None


@dataclass
class CompletionOutput:
    text: str


@dataclass
class RequestOutput:
    prompt: str
    outputs: list[CompletionOutput]


SEEN_ENV = ("VLLM_CACHE_ROOT", "NEURONBUILD_VLLM_COMPAT", "VLLM_ENABLE_V1_MULTIPROCESSING")


class LLM:
    def __init__(self, **engine_args: Any) -> None:
        self.engine_args = engine_args
        if str(engine_args.get("max_num_seqs")) == os.environ.get("CPU_DOUBLE_FAIL_SEQS"):
            raise RuntimeError("cpu double: told to fail this build")
        gate = os.environ.get("CPU_DOUBLE_GATE")
        while gate and not os.path.exists(gate):
            time.sleep(0.05)
        time.sleep(float(os.environ.get("CPU_DOUBLE_SECONDS", "0")))
        text = json.dumps(engine_args, sort_keys=True)
        key = hashlib.sha256(text.encode()).hexdigest()[:10]
        entry = Path(os.environ["VLLM_CACHE_ROOT"]) / "torch_compile_cache" / "torch_aot_compile"
        entry = entry / key
        (entry / "inductor_cache").mkdir(parents=True, exist_ok=True)
        # Bytes differ per build, as two real cold compiles' do.
        (entry / "inductor_cache" / "kernel.so").write_bytes(os.urandom(64) + text.encode())
        (entry / "rank_0_0").mkdir(exist_ok=True)
        (entry / "rank_0_0" / "model").write_bytes(text.encode())
        self.entry = entry
        if builds := os.environ.get("CPU_DOUBLE_BUILDS"):
            line = (
                json.dumps({"engine_args": engine_args, "pid": os.getpid(), "ppid": os.getppid()})
                + "\n"
            )
            fd = os.open(builds, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode())  # one short O_APPEND write: whole lines only
            finally:
                os.close(fd)

    def generate(
        self, prompts: list[str], params: SamplingParams, use_tqdm: bool = True
    ) -> list[RequestOutput]:
        if params.logprobs is not None:  # vLLM compiles its sampler's rank helper (measured)
            (self.entry / "inductor_cache" / "rank_helper.so").write_bytes(b"helper")
        seen = {
            "engine_args": self.engine_args,
            "sampling": asdict(params),
            "cwd": os.getcwd(),
            "env": {name: os.environ.get(name) for name in SEEN_ENV},
        }
        return [
            RequestOutput(p, [CompletionOutput(json.dumps({**seen, "prompt": p}))]) for p in prompts
        ]
