"""``make run``: the whole job on this machine, as a new user sees it.

Trains the demo model, compiles ``recipes/cpu-tiny-llama.yaml`` into a folder store, serves it
with ``neuronbuild serve`` in the background, sends one greedy completion request, prints the
answer beside plain vLLM's answer to the same request and stops the server. Everything it writes
goes under a work folder (``~/.cache/neuronbuild/demo`` by default, under
:func:`neuronbuild.envs.user_cache`), never into the checkout: a copy of the recipe in
``recipes/``, the model in ``build/tiny-llama`` (where the recipe's relative ``model`` points), the
store and the logs; ``serve`` lays the build out in the user cache folder, as on any node.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from neuronbuild import envs
from neuronbuild.demo import text
from neuronbuild.demo.model import build_demo_model
from neuronbuild.demo.plain import PlainVllm
from neuronbuild.demo.server import Server, free_port
from neuronbuild.errors import UserError
from neuronbuild.recipe import load_recipe


def neuronbuild(*args: str) -> list[str]:
    """The command line that runs ``neuronbuild ARGS`` with this interpreter."""
    return [sys.executable, "-m", "neuronbuild", *args]


def serve_and_ask(recipe: str, cache: str, prompt: str, work: Path) -> tuple[str, bool] | None:
    """Steps 3 and 4: serve ``recipe`` from ``cache``, ask ``prompt`` greedily; the answer and
    whether vLLM loaded the prebuilt artifact, or None when the server did not start. The
    server's log goes to ``work/serve.log``."""
    print("== 3/4 serving it from the store with compilation forbidden", flush=True)
    port = free_port()
    log = work / "serve.log"
    serve = neuronbuild("serve", recipe, "--cache", cache, "--port", str(port))
    serve += ["--host", "127.0.0.1"]
    with Server(serve, port, log) as server:
        try:
            seconds = server.wait_ready()
        except RuntimeError as exc:
            print(f"serve failed: {exc}", file=sys.stderr)
            return None
        loaded = "Directly load AOT compilation" in log.read_text(errors="replace")
        print(f"server ready in {seconds:.0f} s (log: {log})", flush=True)
        print(f"== 4/4 one greedy completion request: {prompt!r}", flush=True)
        return server.complete(prompt, max_tokens=text.MAX_TOKENS), loaded


def main(argv: list[str] | None = None) -> int:
    """``make run``'s demo (``argv``: its options, default ``sys.argv[1:]``): train the demo
    model, compile the recipe into the store while plain vLLM answers the prompt, serve the
    build with ``neuronbuild serve``, ask it the same prompt and print both answers.

    Returns the exit code: 0 when the answers are equal and the server loaded the prebuilt
    artifact; 2 for a bad recipe; ``compile``'s own code when it failed; else 1.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--recipe",
        default="recipes/cpu-tiny-llama.yaml",
        help="a recipe whose model is ../build/tiny-llama (the demo model, trained beside it)",
    )
    parser.add_argument("--work-dir", type=Path, default=envs.user_cache() / "demo")
    parser.add_argument("--prompt", default=text.PROMPT)
    args = parser.parse_args(argv)
    work: Path = args.work_dir.absolute()
    model_dir, cache = work / "build" / "tiny-llama", str(work / "store")
    recipe_path = work / "recipes" / Path(args.recipe).name
    try:
        recipe_path.parent.mkdir(parents=True, exist_ok=True)
        if not (recipe_path.exists() and recipe_path.samefile(args.recipe)):
            shutil.copyfile(args.recipe, recipe_path)  # its relative model is then work's build/
    except OSError as exc:
        print(f"{args.recipe}: cannot copy it into {work}: {exc}", file=sys.stderr)
        return 2

    print(f"== 1/4 training the demo model in {model_dir}", flush=True)
    build_demo_model(model_dir, report=print)
    try:
        recipe = load_recipe(str(recipe_path))
    except UserError as exc:
        print(f"{args.recipe}: {exc}", file=sys.stderr)
        return 2
    plain_log = work / "plain-vllm.log"
    # Plain vLLM answers the same request meanwhile, for comparison, on the core that the compile
    # (Inductor compiles on one thread) or the server's start leaves idle most of the time.
    with PlainVllm(recipe, args.prompt, text.MAX_TOKENS, plain_log) as plain:
        print(f"== 2/4 compiling {args.recipe} ahead of time into {cache}", flush=True)
        print(f"(plain vLLM answers the same request meanwhile; log: {plain_log})", flush=True)
        logs = str(work / "logs")
        compile_ = neuronbuild("compile", str(recipe_path), "--cache", cache, "--log-dir", logs)
        compiled = subprocess.run(compile_)
        if compiled.returncode != 0:
            return compiled.returncode
        served = serve_and_ask(str(recipe_path), cache, args.prompt, work)
        if served is None:
            return 1
        answer, loaded = served
        try:
            plain_answer, plain_seconds = plain.answer()
        except RuntimeError as exc:
            print(f"plain vLLM failed: {exc}", file=sys.stderr)
            return 1
    same = answer == plain_answer
    print(f"neuronbuild serve: {answer!r}")
    print(f"plain vLLM:        {plain_answer!r}")
    print(f"same answer: {'yes' if same else 'no'}")
    print(
        f"(plain vLLM: eager, in one process, no neuronbuild; it answered {plain_seconds:.0f} s "
        f"after its start)"
    )
    print(
        "demo done: vLLM served a model compiled ahead of time by neuronbuild, "
        + (
            "loading the prebuilt artifact from the store and compiling nothing at start."
            if loaded
            else "but its log lacks the AOT load line; see the log."
        )
    )
    return 0 if loaded and same else 1
