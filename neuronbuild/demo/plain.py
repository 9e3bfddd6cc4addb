"""Plain vLLM's greedy answer to a prompt: the recipe's engine arguments given straight to
``vllm.LLM`` in a child process, with none of neuronbuild's artifacts, store or vLLM plugin, as
the reference that ``neuronbuild serve``'s answer is compared with.

The child runs ``python -m neuronbuild.demo.plain ENGINE_ARGS_JSON PROMPT MAX_TOKENS`` in the
recipe's folder (a relative model path resolves there, as at compile and serve) and prints the
answer as one JSON line after :data:`ANSWER`: ``{"text": ..., "at": <Unix seconds>}``. The work
sits under a ``__main__`` guard, as every script that builds ``vllm.LLM`` (cpu-engine-facts.md).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from neuronbuild import envs
from neuronbuild.demo.server import READY_TIMEOUT, Child

if TYPE_CHECKING:
    from typing import Self

    from neuronbuild.recipe import Recipe

ANSWER = "neuronbuild-demo-plain-answer: "
"""Starts the child's answer line (vLLM logs to the same streams)."""

LEAN = {"enforce_eager": True, "distributed_executor_backend": "uni"}
"""Engine arguments added to the recipe's so that plain vLLM costs the demo little: the model runs
eagerly (vLLM's CPU start otherwise compiles it with Inductor, a second compile beside the demo's
own, about a minute on 2 cores), and in one process (with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``;
each of vLLM's processes otherwise imports torch and vLLM again). Measured on a loaded 2-core
machine: the answer 41 s after start, 18 s of CPU, against 59 s with vLLM's own processes. Greedy
decoding still picks the same tokens: each next token of the demo model leads the runner-up by 7
logits or more, far beyond what bfloat16 rounding in another kernel order moves."""


class PlainVllm(Child):
    """Plain vLLM (``vllm.LLM`` with ``recipe``'s engine arguments and :data:`LEAN`) answering
    ``prompt`` greedily (temperature 0, at most ``max_tokens`` tokens) in a child process whose
    output goes to ``log``.

    Use as a context manager: entering starts it (it runs beside whatever the caller does next),
    :meth:`answer` waits for the answer, leaving ends its process group. Its ``VLLM_CACHE_ROOT``
    is a fresh temporary folder, removed on leaving, so nothing neuronbuild built is read; and
    ``NEURONBUILD_VLLM_COMPAT=0`` keeps neuronbuild's vLLM plugin out.
    """

    def __init__(self, recipe: Recipe, prompt: str, max_tokens: int, log: Path) -> None:
        argv = [sys.executable, "-m", "neuronbuild.demo.plain"]
        argv += [json.dumps({**recipe.engine_args, **LEAN}), prompt, str(max_tokens)]
        super().__init__(argv, log, cwd=recipe.workdir)
        self.cache_root: Path | None = None
        self.started_at = 0.0

    def __enter__(self) -> Self:
        self.cache_root = Path(tempfile.mkdtemp(prefix="neuronbuild-plain-vllm-"))
        self.env = {**envs.process_environ(), envs.HF_HUB_OFFLINE: "1"}
        self.env[envs.VLLM_CACHE_ROOT] = str(self.cache_root)
        self.env[envs.NEURONBUILD_VLLM_COMPAT] = "0"
        self.env[envs.VLLM_ENABLE_V1_MULTIPROCESSING] = "0"
        self.started_at = time.time()
        return super().__enter__()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        super().__exit__(kind, exc, tb)
        if self.cache_root is not None:
            shutil.rmtree(self.cache_root, ignore_errors=True)

    def answer(self, timeout: float = READY_TIMEOUT) -> tuple[str, float]:
        """The answer, and the seconds from start until the child printed it (it may have run
        beside other work long before this call); then ends the child (vLLM's own shutdown takes
        seconds more and tells nothing).

        Raises:
            RuntimeError: the child exited without an answer, or gave none within ``timeout``
                seconds of its start (the log's last lines are in the message).
        """
        assert self.proc is not None
        deadline = self.started + timeout
        while time.monotonic() < deadline:
            exited = self.proc.poll() is not None
            lines = self.log.read_text(errors="replace").splitlines()
            answers = [json.loads(ln[len(ANSWER) :]) for ln in lines if ln.startswith(ANSWER)]
            if answers:
                self.stop()
                return str(answers[-1]["text"]), float(answers[-1]["at"]) - self.started_at
            if exited:
                raise RuntimeError(f"plain vLLM exited with {self.proc.returncode}:\n{self.tail()}")
            time.sleep(0.5)
        raise RuntimeError(f"plain vLLM gave no answer in {timeout:.0f} s:\n{self.tail()}")


def main(argv: list[str]) -> int:
    """The child: build ``vllm.LLM`` from ``argv[0]`` (JSON), answer ``argv[1]`` greedily with at
    most ``argv[2]`` tokens, print the answer line."""
    engine_args: dict[str, Any] = json.loads(argv[0])
    from vllm import LLM, SamplingParams

    llm = LLM(**engine_args)
    [request] = llm.generate([argv[1]], SamplingParams(temperature=0, max_tokens=int(argv[2])))
    answer = {"text": request.outputs[0].text, "at": time.time()}
    print(ANSWER + json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
