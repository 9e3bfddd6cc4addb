"""A double of vLLM's OpenAI-compatible server for ``neuronbuild probe``'s tests: ``/v1/models``
names one model, ``/v1/completions`` answers each prompt from a table with its tokens and their
logprobs, as vLLM does for ``logprobs: 1``. The real server is probed in
``tests/runtime/test_probe_vllm.py``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from neuronbuild.node.probe import PROMPTS


class Answers:
    """What the double answers: per prompt, ``(tokens, logprobs)``; ``asked``: each request body
    it was sent; ``on_ask``: called at each completion (a server that compiles as it answers)."""

    def __init__(self) -> None:
        self.table = {p: ([f" {p[:2]}", " x"], [-0.5, -1.25]) for p in PROMPTS}
        self.asked: list[dict[str, Any]] = []
        self.on_ask: Callable[[], None] = lambda: None


@contextmanager
def openai_double() -> Iterator[tuple[str, Answers]]:
    """A running double on a free loopback port: ``(its URL, its answers)``; stopped on exit."""
    answers = Answers()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def reply(self, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self.reply({"data": [{"id": "./m"}]})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            answers.asked.append(body)
            answers.on_ask()
            tokens, logprobs = answers.table[body["prompt"]]
            logged = {"tokens": tokens, "token_logprobs": logprobs}
            self.reply({"choices": [{"text": "".join(tokens), "logprobs": logged}]})

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", answers
    finally:
        httpd.shutdown()
        httpd.server_close()
