"""Test double of vLLM's OpenAI server module: parse the engine arguments, build the engine, then
report and exit (a real server would listen)."""

from __future__ import annotations

import http.server
import json
import os
import sys
from typing import Any

from vllm import current_platform


def parse(argv: list[str]) -> dict[str, Any]:
    """vLLM's CLI back to engine arguments: ``--x v``, ``--x v1 v2``, ``--x``, ``--no-x``."""
    args: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        name = argv[i][2:].replace("-", "_")
        values = []
        i += 1
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        if not values:
            args[name.removeprefix("no_")] = not name.startswith("no_")
            continue
        parsed = []
        for v in values:
            try:
                parsed.append(json.loads(v))
            except ValueError:
                parsed.append(v)
        list_args = name.endswith("_buckets")
        args[name] = parsed if len(parsed) > 1 or list_args else parsed[0]
    return args


def listen(host: str, port: int) -> None:
    """Serve ``GET /health`` (200) forever, as a started server does, until the process is
    ended: for ``NEURON_DOUBLE_LISTEN=1`` (a compile worker must stop a server that never exits)."""

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    http.server.HTTPServer((host, port), Health).serve_forever()


if __name__ == "__main__":
    engine_args = parse(sys.argv[1:])
    loaded = current_platform().build_engine(engine_args)
    print(f"neuron double: server ready, {loaded} graphs loaded from the local compile cache")
    if os.environ.get("NEURON_DOUBLE_LISTEN") and "port" in engine_args:
        listen(str(engine_args.get("host", "127.0.0.1")), int(engine_args["port"]))
