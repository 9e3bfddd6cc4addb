"""The process the ``neuron`` engine runs per phase unit: vLLM's OpenAI API server, the entry point
serve runs, with the recipe's command line, under vLLM-Neuron's CPU compile mode; it compiles the
unit's phase into ``$VLLM_CACHE_ROOT/neuron/compile_cache/`` and is stopped once it serves.

Run as ``python -m neuronbuild.engines.neuron.compile_worker ARGV_JSON`` (a JSON list: the API
server's arguments, the ones serve passes, built by the same function) with the environment
:class:`~neuronbuild.engines.neuron.compile.NeuronCompiler` sets (``VLLM_NEURON_CPU_COMPILE=1``,
``NEURON_PLATFORM_TARGET_OVERRIDE`` present from the start, before any Neuron import).

Why the API server and not ``LLM(...)``: vLLM-Neuron resolves settings from ``sys.argv`` (an
explicit ``--optimization-level`` keeps O2, the offline API always gets O1:
``apply_config_platform_defaults``, fidelity row B10), and the official CPU-compile workflow runs
this very module (aws-neuron-sdk @81ce03ae ``vllm-neuron/docs/model-dev/cpu-development.md`` lines
129-165, row A5); one entry point also keeps import order, which FX text can depend on, alike.

vLLM-Neuron returns from ``compile_or_warm_up_model`` and vLLM goes on to serve (no code path
exits: contract section 2), so a thread polls the server's ``/health`` on a loopback port chosen
here; once it answers, every graph of the phase is compiled and the worker leaves with
``os._exit`` (the scheduler ends the rest of the process group). A server module that returns by
itself has finished too.
"""

from __future__ import annotations

import json
import os
import runpy
import socket
import sys
import threading
import time
import urllib.request

from neuronbuild.engines.vllm_args import API_SERVER  # the module serve runs

DONE = "neuronbuild: vLLM-Neuron compile finished"
"""The line the worker prints once the engine is built (every graph of the phase compiled)."""

HEALTH_POLL_SECONDS = 2.0


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def finish() -> None:
    print(DONE, flush=True)
    sys.stderr.flush()
    os._exit(0)


def watch_health(port: int) -> None:
    """Poll ``http://127.0.0.1:<port>/health`` until it answers 200, then :func:`finish`."""
    url = f"http://127.0.0.1:{port}/health"
    while True:
        time.sleep(HEALTH_POLL_SECONDS)
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    finish()
        except OSError:
            continue


def main(argv: list[str]) -> int:
    port = free_port()
    sys.argv = [API_SERVER, *json.loads(argv[0]), "--host", "127.0.0.1", "--port", str(port)]
    threading.Thread(target=watch_health, args=(port,), daemon=True).start()
    runpy.run_module(API_SERVER, run_name="__main__", alter_sys=True)
    finish()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
