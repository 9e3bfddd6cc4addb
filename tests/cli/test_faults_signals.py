"""Signals and broken output streams, in real child processes: SIGTERM, SIGINT or SIGHUP in the
middle of a store call ends any command with 128 + N and one line (never "store error", exit 3);
a reader that closes the pipe ends it quietly with 141, as a command killed by SIGPIPE; a full
device behind stdout is one line and exit 3, never a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from neuronbuild.store.transfer import copy_manifest
from tests.conftest import REPO, SERVE_WITHOUT_VLLM, moto_s3, published_with_model
from tests.lib.faulty_proxy import FaultyProxy

BUCKET = "neuronbuild-signals"
STALL_SECONDS = 60.0
"""How long the proxy holds each request once stalling: far past the test's own wait."""


@pytest.fixture(scope="module")
def moto_env() -> Iterator[dict[str, str]]:
    with moto_s3(BUCKET) as env:
        yield env


@pytest.fixture(scope="module")
def remote(moto_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> str:
    """An S3 store (straight on moto) holding one published build as ``tiny/latest``."""
    local, digest = published_with_model(tmp_path_factory.mktemp("published"))
    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
    store = Store(url, create=True)
    copy_manifest(local, store, digest)
    store.set_ref("tiny", "latest", digest)
    return url


def stopped_mid_store_call(
    argv: list[str], moto_env: dict[str, str], signum: int, after: int = 2
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` (a Python command line) against S3 through a proxy that answers ``after``
    requests, then holds every further one; once the command waits on a held request, send it
    ``signum``. Returns the finished process (its stderr as text)."""
    port = int(moto_env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
    with FaultyProxy(port) as proxy:
        env = {
            **os.environ,
            **moto_env,
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}",
            "PYTHONPATH": str(REPO),
        }
        # The signal at its default, as a shell gives it: under nohup (SIGHUP ignored), the
        # command keeps an ignored signal ignored, by design.
        proc = subprocess.Popen(
            argv, env=env, stderr=subprocess.PIPE, text=True, cwd=REPO,
            preexec_fn=lambda: signal.signal(signum, signal.SIG_DFL),
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while proxy.requests < after and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        proxy.stall_every, proxy.stall_seconds = 1, STALL_SECONDS
        while not proxy.stalled and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.3)  # inside the held request
        proc.send_signal(signum)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"still running 30 s after {signal.Signals(signum).name}")
        return subprocess.CompletedProcess(argv, proc.returncode, "", err)


def assert_stopped(done: subprocess.CompletedProcess[str], signum: int) -> None:
    """``done`` ended with 128 + ``signum`` and the one line saying so, last on stderr (a retry
    line may come before it), and nothing calls it a store error or shows a traceback."""
    assert done.returncode == 128 + signum, done.stderr
    assert done.stderr.splitlines()[-1] == f"interrupted by {signal.Signals(signum).name}"
    assert "store error" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def neuronbuild_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "neuronbuild", *args]


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=["TERM", "INT", "HUP"]
)
@pytest.mark.slow
def test_gc_stopped_by_a_signal_in_a_store_call_exits_128_plus_n_with_one_line(
    remote: str, moto_env: dict[str, str], signum: int
) -> None:
    done = stopped_mid_store_call(neuronbuild_argv("gc", "--cache", remote), moto_env, signum)
    assert_stopped(done, signum)


@pytest.mark.slow
def test_push_stopped_by_sigterm_while_uploading_exits_143(
    moto_env: dict[str, str], tmp_path: Path
) -> None:
    local, _ = published_with_model(tmp_path)
    target = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
    argv = neuronbuild_argv("push", "tiny/latest", "--from", local.url, "--cache", target)
    done = stopped_mid_store_call(argv, moto_env, signal.SIGTERM, after=3)
    assert_stopped(done, signal.SIGTERM)


@pytest.mark.slow
def test_pull_stopped_by_sigterm_while_fetching_exits_143(
    remote: str, moto_env: dict[str, str], tmp_path: Path
) -> None:
    argv = neuronbuild_argv("pull", "tiny/latest", "--cache", remote)
    argv += ["--local-cache", str(tmp_path / "node")]
    done = stopped_mid_store_call(argv, moto_env, signal.SIGTERM, after=3)
    assert_stopped(done, signal.SIGTERM)


@pytest.mark.slow
def test_serve_stopped_by_sigterm_while_fetching_exits_143(
    remote: str, moto_env: dict[str, str], tmp_path: Path
) -> None:
    argv = [sys.executable, "-c", SERVE_WITHOUT_VLLM, "--ref", "tiny/latest", "--cache", remote]
    argv += ["--local-cache", str(tmp_path / "node"), "--vllm-cache-root", str(tmp_path / "root")]
    done = stopped_mid_store_call(argv, moto_env, signal.SIGTERM, after=3)
    assert_stopped(done, signal.SIGTERM)


@pytest.fixture
def folder_store(tmp_path: Path) -> str:
    store, _ = published_with_model(tmp_path)
    return store.url


def piped_into_early_close(argv: list[str], keep: int) -> tuple[int, str]:
    """Run ``argv`` with stdout into a pipe whose reader reads ``keep`` bytes (0: none, it is
    gone before the command prints) and closes it, as ``| head -c KEEP`` does. Returns the exit
    code and stderr."""
    read, write = os.pipe()
    proc = subprocess.Popen(
        argv, stdout=write, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    os.close(write)
    if keep:
        os.read(read, keep)
    os.close(read)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


@pytest.mark.parametrize("json", [[], ["--json"]], ids=["table", "json"])
def test_a_reader_closing_the_pipe_ends_the_command_quietly_with_141(
    folder_store: str, json: list[str]
) -> None:
    code, err = piped_into_early_close(neuronbuild_argv("ls", "--cache", folder_store, *json), 0)
    assert (code, err) == (128 + signal.SIGPIPE, "")


def test_a_reader_closing_the_pipe_on_a_long_output_ends_it_quietly_with_141(
    tmp_path: Path,
) -> None:
    # Far more than a pipe buffer holds: the write fails while the command runs, not at exit.
    script = "from neuronbuild.ui.console import run; import click, sys\n"
    script += "@click.command()\ndef many():\n    for i in range(10**6): click.echo(f'line {i}')\n"
    script += "run(many, [])"
    code, err = piped_into_early_close([sys.executable, "-c", script], 10)
    assert (code, err) == (128 + signal.SIGPIPE, "")


@pytest.mark.parametrize("json", [[], ["--json"]], ids=["table", "json"])
def test_stdout_on_a_full_device_is_one_line_and_exit_3(folder_store: str, json: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            neuronbuild_argv("ls", "--cache", folder_store, *json),
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO,
        )  # fmt: skip
    assert done.returncode == 3, done.stderr
    assert done.stderr == "error: cannot write standard output: No space left on device\n"


def test_stderr_on_a_full_device_still_exits_with_the_commands_code(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a store")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            neuronbuild_argv("ls", "--cache", str(tmp_path / "a-file")),
            stdout=subprocess.PIPE, stderr=full, text=True, cwd=REPO,
        )  # fmt: skip
    assert done.returncode == 2  # bad input, whose line went nowhere: not 3, not a traceback's 1
    assert done.stdout == ""


def test_a_stop_signal_the_process_ignores_stays_ignored() -> None:
    """``nohup neuronbuild compile`` (SIGHUP ignored) outlives its terminal: the CLI's and the
    scheduler's handlers are installed only for stop signals not ignored (review finding)."""
    from neuronbuild.errors import catch_stop_signals

    # SIGINT and SIGTERM at their defaults: a shell's background job (`cmd &`) starts with
    # SIGINT ignored, which the CLI rightly keeps ignored too.
    wanted = {
        signal.SIGHUP: signal.SIG_IGN,
        signal.SIGINT: signal.default_int_handler,
        signal.SIGTERM: signal.SIG_DFL,
    }
    before = {s: signal.signal(s, handler) for s, handler in wanted.items()}
    try:
        previous = catch_stop_signals(lambda *_: None)
        assert signal.SIGHUP not in previous
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
        assert set(previous) == {signal.SIGINT, signal.SIGTERM}
    finally:
        for s, handler in before.items():
            signal.signal(s, handler)
