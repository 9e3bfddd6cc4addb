"""The README's walk-through runs as written, and every recipe and option the README names exists.

The walk-through is the README section "From nothing to a serving node": its ``console`` blocks'
``$`` lines are run in order by one bash process (so ``cd``, ``export`` and background jobs carry
from one command to the next), each checked to exit 0, or the status its trailing comment states
(``# exits 2: ...``). A ``yaml`` block preceded by ``<!-- file: NAME -->`` is written to NAME in
the folder the walk-through is in at that point; a block preceded by
``<!-- readme-test: real vLLM only -->`` needs a real vLLM server and is left out of the run with
the test double.

The fresh folder: an empty temporary folder and an empty home directory (so the default store and
``~/.cache`` start empty), with the installed ``neuronbuild`` (this interpreter's ``bin``) first on
``PATH`` and nothing else of the caller's environment. No checkout is copied: the walk-through
builds its model and writes its recipe itself, as a user with neuronbuild installed would.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from neuronbuild.cli.main import all_commands, cli
from neuronbuild.data.vllm_data import server_options
from neuronbuild.demo.server import free_port
from neuronbuild.store.cas import Store
from tests.cli.test_examples import SHELL_OPERATORS, problems
from tests.conftest import RECIPES, REPO
from tests.lib import planted

README = REPO / "README.md"
WALKTHROUGH_TITLE = "## From nothing to a serving node"
REAL_VLLM_ONLY = "<!-- readme-test: real vLLM only -->"
FILE_MARKER = re.compile(r"<!-- file: (\S+) -->")
EXPECTED_EXIT = re.compile(r"#\s*exits? (\d+)\b[^'\"]*$")
DOUBLE = REPO / "tests" / "cpu_double"
README_PORT = "8000"
"""The port the README's server listens on; the real-vLLM run swaps in a free one."""


@dataclass(frozen=True)
class Step:
    """One thing the walk-through does: a shell ``command`` (``file`` is None) that must exit
    ``exit``, or the ``text`` of a file to write as ``file``; ``real_vllm_only`` when its block
    needs a real vLLM server."""

    command: str
    exit: int = 0
    file: str | None = None
    real_vllm_only: bool = False


def section(text: str, title: str) -> str:
    """The README section under ``title``, up to the next heading of the same level."""
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    return text[start : end if end != -1 else len(text)]


def fenced_blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """``(language, body, markers)`` of every fenced block, ``markers`` being the HTML comments
    on the lines just above it."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = re.fullmatch(r"```(\w*)", lines[i].strip())
        if not match:
            i += 1
            continue
        markers = []
        j = i - 1
        while j >= 0 and lines[j].strip().startswith("<!--"):
            markers.append(lines[j].strip())
            j -= 1
        end = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == "```")
        blocks.append((match.group(1), "\n".join(lines[i + 1 : end]) + "\n", markers))
        i = end + 1
    return blocks


def console_commands(body: str) -> list[str]:
    """The ``$`` lines of a console block, a line ending in ``\\`` joined with the next ones."""
    commands: list[str] = []
    lines = iter(body.splitlines())
    for line in lines:
        if not line.startswith("$ "):
            continue  # output shown in the README
        command = line[2:]
        while command.endswith("\\"):
            command = command[:-1] + next(lines).strip()
        commands.append(command)
    return commands


def walkthrough(text: str) -> list[Step]:
    """The walk-through's steps, in README order."""
    steps = []
    for language, body, markers in fenced_blocks(section(text, WALKTHROUGH_TITLE)):
        real_only = REAL_VLLM_ONLY in markers
        files = [m.group(1) for m in map(FILE_MARKER.fullmatch, markers) if m]
        if files:
            steps.append(Step(command=body, file=files[0], real_vllm_only=real_only))
        elif language == "console":
            for command in console_commands(body):
                expected = EXPECTED_EXIT.search(command)
                steps.append(
                    Step(
                        command=command,
                        exit=int(expected.group(1)) if expected else 0,
                        real_vllm_only=real_only,
                    )
                )
    return steps


def script(steps: list[Step], status: Path) -> str:
    """A bash script that runs ``steps`` in order, appends ``<index> <exit status>`` to
    ``status`` after each command, and stops at the first unexpected status."""
    out = [f"STATUS={shlex.quote(str(status))}"]
    for i, step in enumerate(steps):
        if step.file is not None:
            out.append(
                f"cat > {shlex.quote(step.file)} <<'README_FILE_END'\n{step.command}README_FILE_END"
            )
            continue
        out += [
            f"printf '\\n$ %s\\n' {shlex.quote(step.command)}",
            step.command,
            f'rc=$?; echo "{i} $rc" >> "$STATUS"; [ "$rc" -eq {step.exit} ] || exit 1',
        ]
    return "\n".join(out) + "\n"


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """A new user's environment: the installed neuronbuild first on PATH, an empty home."""
    env = {
        "PATH": os.pathsep.join(
            [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]
        ),
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }
    if "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    env.update(extra)
    return env


def run_walkthrough(steps: list[Step], folder: Path, env: dict[str, str], timeout: float) -> None:
    """Run ``steps`` in ``folder`` (empty) and fail naming the first command that exited
    otherwise than the README says, with the output's tail. Every process the walk-through
    started (a background server included) is ended afterwards."""
    status, log = folder.parent / "status.txt", folder.parent / "walkthrough.log"
    status.unlink(missing_ok=True)
    (folder.parent / "walkthrough.sh").write_text(script(steps, status))
    timed_out = False
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            ["bash", str(folder.parent / "walkthrough.sh")],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            end_group(proc)
    done = [line.split() for line in status.read_text().splitlines()] if status.exists() else []
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
    if timed_out:
        pytest.fail(f"the walk-through ran past {timeout:.0f} s:\n{tail}")
    if done and int(done[-1][1]) != steps[int(done[-1][0])].exit:
        index, code = int(done[-1][0]), int(done[-1][1])
        pytest.fail(
            f"README command exited {code}, the README says {steps[index].exit}: "
            f"{steps[index].command}\n{tail}"
        )
    commands = [i for i, s in enumerate(steps) if s.file is None]
    assert proc.returncode == 0 and [int(i) for i, _ in done] == commands, tail


def end_group(proc: subprocess.Popen[bytes]) -> None:
    """End ``proc``'s whole process group (the walk-through's background jobs included):
    SIGTERM, then SIGKILL to what is left after 20 s."""
    for sig, grace in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and group_alive(proc.pid):
            time.sleep(0.2)
        if not group_alive(proc.pid):
            break
    proc.wait()


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def assert_rolled_back(folder: Path) -> None:
    """After the walk-through, ``prod`` moved to build 1, then to build 2 (another manifest),
    then back to build 1, as the README's promotion and rollback say."""
    store = Store(str(folder / "neuronbuild-demo" / "shared-store"))
    one, two = store.resolve("cpu-tiny-llama/build-1"), store.resolve("cpu-tiny-llama/build-2")
    assert one != two
    moves = [m.manifest for m in store.ref_history("cpu-tiny-llama", "prod")]
    assert moves == [one, two, one]
    assert store.resolve("cpu-tiny-llama/prod") == one


def readme_steps() -> list[Step]:
    return walkthrough(README.read_text())


# -- what the README names exists ------------------------------------------------------------


def test_the_walkthrough_goes_from_a_recipe_to_a_served_and_rolled_back_build() -> None:
    """The markers the runs depend on are there: without this, a renamed block would leave the
    walk-through tests running nothing."""
    steps = readme_steps()
    files = [s.file for s in steps if s.file is not None]
    assert files == ["cpu-tiny-llama.yaml", "policy.yaml"]
    words = [shlex.split(s.command, comments=True)[:2] for s in steps if s.file is None]
    order = [
        ["neuronbuild", "validate"],
        ["neuronbuild", "compile"],
        ["neuronbuild", "push"],
        ["neuronbuild", "tag"],
        ["neuronbuild", "ls"],
        ["neuronbuild", "pull"],
        ["neuronbuild", "serve"],
        ["curl", "-sf"],
        ["openssl", "genpkey"],
        ["neuronbuild", "sign"],  # step 6: a signed build, a node under a policy
    ]
    positions = [words.index(w) for w in order]
    assert positions == sorted(positions), words
    real_only = [s.command for s in steps if s.real_vllm_only]
    assert any("serve" in c and "--dry-run" not in c for c in real_only)
    assert any(f"--port {README_PORT}" in c for c in real_only)
    # A move back without --rollback, a typo, an unsigned build under the node's policy.
    assert [s.exit for s in steps if s.exit] == [2, 2, 2]
    assert any("--policy policy.yaml" in s.command and s.exit == 2 for s in steps)


def test_the_walkthrough_extraction_reads_prompts_continuations_files_and_exits() -> None:
    text = (
        f"{WALKTHROUGH_TITLE}\n\n<!-- file: r.yaml -->\n```yaml\nname: x\n```\n\n"
        "```console\n$ echo a \\\n    b\nsome output\n$ false   # exits 1: told so\n```\n\n"
        f"{REAL_VLLM_ONLY}\n```console\n$ serve &\n```\n\n```sh\nnot-run\n```\n\n"
        "## Next\n```console\n$ not-run-either\n```\n"
    )
    assert walkthrough(text) == [
        Step(command="name: x\n", file="r.yaml"),
        Step(command="echo a b"),
        Step(command="false   # exits 1: told so", exit=1),
        Step(command="serve &", real_vllm_only=True),
    ]


@pytest.mark.slow
def test_the_walkthrough_runner_stops_at_a_command_whose_exit_differs(tmp_path: Path) -> None:
    folder = tmp_path / "fresh"
    folder.mkdir()
    steps = [Step(command="true"), Step(command="(exit 3)"), Step(command="touch never")]
    with pytest.raises(pytest.fail.Exception, match=r"exited 3, the README says 0: \(exit 3\)"):
        run_walkthrough(steps, folder, clean_env(tmp_path / "home"), timeout=30)
    assert not (folder / "never").exists()
    with pytest.raises(pytest.fail.Exception, match="exited 0, the README says 1"):
        run_walkthrough([Step(command="true", exit=1)], folder, clean_env(tmp_path), 30)
    steps = [
        Step(command="sleep 300 & echo $! > sleeper.pid"),  # a background job the runner ends
        Step(command="x: 1\n", file="f.yaml"),
        Step(command="grep -q 'x: 1' f.yaml && false  # exits 1", exit=1),
    ]
    run_walkthrough(steps, folder, clean_env(tmp_path), timeout=30)
    assert not running(int((folder / "sleeper.pid").read_text()))


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def recipe_blocks(text: str) -> list[str]:
    """Every YAML block of ``text`` that is a recipe (a mapping with ``name`` and ``target``)."""
    out = []
    for language, body, _ in fenced_blocks(text):
        data = yaml.safe_load(body) if language in ("yaml", "yml") else None
        if isinstance(data, dict) and {"name", "target"} <= data.keys():
            out.append(body)
    return out


def test_every_recipe_in_the_readme_passes_validate(tmp_path: Path) -> None:
    blocks = recipe_blocks(README.read_text())
    assert len(blocks) >= 4  # the walk-through's, the Neuron example, the upgrade's two
    paths = []
    for i, body in enumerate(blocks):
        paths.append(tmp_path / f"readme-{i}.yaml")
        paths[-1].write_text(body)
    result = subprocess.run(
        [sys.executable, "-m", "neuronbuild", "validate", "--json", *map(str, paths)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    checked = json.loads(result.stdout)["recipes"]
    assert len(checked) == len(blocks) and all(r["valid"] for r in checked)


def test_the_walkthrough_recipe_is_the_demo_recipe_with_the_model_beside_it() -> None:
    (step,) = [s for s in readme_steps() if s.file == "cpu-tiny-llama.yaml"]
    readme = yaml.safe_load(step.command)
    demo = yaml.safe_load((RECIPES / "cpu-tiny-llama.yaml").read_text())
    assert readme.pop("model") == "tiny-llama"
    demo.pop("model")
    assert readme == demo


SHELL_BLOCKS = ("console", "sh", "bash", "shell")
OTHER_TOOLS = {"--lnc", "-lnc", "-O", "-O1"}
"""Options the README names of tools other than neuronbuild and vLLM (neuronx-cc's, in the
spellings ``NEURON_CC_FLAGS`` normalises)."""
OPTION = re.compile(r"--?[A-Za-z][\w-]*")


def named_options(span: str) -> tuple[str, list[str]] | None:
    """``(command, options)`` named by an inline code span or a command table cell such as
    ``serve --ref NAME/TAG [--deep]``, or None when it does not start with a command."""
    words = span.replace("\\|", " ").split()
    if words and words[0] == "neuronbuild":
        words = words[1:]
    if not words or words[0] not in all_commands():
        return None
    options = []
    for word in words[1:]:
        for part in word.strip("[]()|,;.").split("/"):
            name = part.strip("[]()|").split("=", 1)[0]
            if OPTION.fullmatch(name):
                options.append(name)
    return words[0], options


def option_problems(text: str) -> list[str]:
    """Every command or option ``text`` names that the CLI lacks: in its code blocks'
    ``neuronbuild ...`` lines (checked as examples/ are), in inline code spans and command table
    cells that start with a command name, and in spans that are a lone option."""
    out = []
    for language, body, _ in fenced_blocks(text):
        if language not in SHELL_BLOCKS:
            continue
        for line in body.replace("\\\n", " ").splitlines():
            tokens = shlex.split(line.removeprefix("$ "), comments=True)
            for i, token in enumerate(tokens):  # each command of the line that is neuronbuild
                if token == "neuronbuild" and (i == 0 or tokens[i - 1] in SHELL_OPERATORS):
                    rest = tokens[i:]
                    end = next((j for j, t in enumerate(rest) if t in SHELL_OPERATORS), len(rest))
                    out += problems(rest[:end])
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    vllm = set(server_options())
    commands = all_commands()
    anywhere = {
        o
        for c in (cli, *commands.values())  # the group's own options (-v, -q) too
        for p in c.params
        for o in (*p.opts, *p.secondary_opts)
    }
    for span in re.findall(r"`([^`\n]+)`", prose):
        named = named_options(span)
        if named is None:  # a lone option names no command: some command (or vLLM) must have it
            lone = span.split()[0] if span.split() else ""
            if OPTION.fullmatch(lone) and lone not in anywhere | vllm | OTHER_TOOLS:
                out.append(f"no command has option {lone}")
            continue
        command, options = named
        params = commands[command].params
        known = {o for p in params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}
        if command == "serve":
            known |= vllm
        out += [f"{command}: no option {o}" for o in options if o not in known]
    return out


def test_every_command_and_option_the_readme_names_exists() -> None:
    assert not option_problems(README.read_text())


def test_the_option_check_catches_a_misspelt_option_in_a_block_a_span_and_the_table() -> None:
    assert option_problems("```console\n$ neuronbuild compile r.yaml --shards 0/2\n```\n") == [
        "compile: no option --shards"
    ]
    assert option_problems("```sh\ncd neuronbuild && neuronbuild seel r.yaml\n```\n") == [
        "no command ['seel']"
    ]
    assert option_problems("run `ls --histories` to see") == ["ls: no option --histories"]
    assert option_problems("| `pull REF\\|MANIFEST [--locale-cache DIR]` | x |") == [
        "pull: no option --locale-cache"
    ]
    assert option_problems("`serve --ref/--manifst` and `serve --port 1`") == [
        "serve: no option --manifst"
    ]
    assert not option_problems("`serve --ref/--manifest` takes `--workdir`; `tag` and `plan`")
    assert option_problems("the option `--last-writer-win` alone") == [
        "no command has option --last-writer-win"
    ]
    assert not option_problems("`--last-writer-wins`, `--port` (vLLM's), `--lnc` (neuronx-cc's)")


# -- the walk-through runs ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_walkthrough_runs_with_the_cpu_double(tmp_path: Path) -> None:
    """Every command but the real server's, in order, with vLLM's CPU build replaced by the
    test double (``tests/cpu_double``): seconds instead of minutes, on every CI run. The
    walk-through's environment holds planted credentials (issue 43 item 7): none is in its
    output or in any file it leaves (stores, manifests, attestations, logs, lay-outs)."""
    steps = [s for s in readme_steps() if not s.real_vllm_only]
    folder = tmp_path / "fresh"
    folder.mkdir()
    env = clean_env(tmp_path / "home", PYTHONPATH=str(DOUBLE), **planted.planted_env())
    run_walkthrough(steps, folder, env, timeout=300)
    assert_rolled_back(folder)
    planted.assert_none_under(tmp_path)  # walkthrough.log, the stores, the home


@pytest.mark.vllm
def test_the_walkthrough_runs_as_written_with_real_vllm(tmp_path: Path) -> None:
    """The README's commands, in order, in a fresh folder, with the real vLLM CPU build: one
    compile of the demo recipe, one server started, asked and stopped. The only change made to
    them: the server's port 8000 becomes a free one (tests may run beside other servers)."""
    port = str(free_port())
    steps = [
        Step(
            command=re.sub(rf"(?<=[ :]){README_PORT}\b", port, s.command),
            exit=s.exit,
            file=s.file,
            real_vllm_only=s.real_vllm_only,
        )
        for s in readme_steps()
    ]
    assert sum(port in s.command for s in steps) >= 2  # the server and the requests
    folder = tmp_path / "fresh"
    folder.mkdir()
    run_walkthrough(steps, folder, clean_env(tmp_path / "home"), timeout=1500)
    assert_rolled_back(folder)
    serve_log = folder / "neuronbuild-demo" / "serve.log"
    assert "Directly load AOT compilation" in serve_log.read_text(errors="replace")
    # The answer the README promises (the demo model is trained on that paragraph).
    answer = "a single man in possession of a good fortune, must be in want of a wife."
    assert answer in (tmp_path / "walkthrough.log").read_text(errors="replace")
