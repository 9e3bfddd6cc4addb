"""Long work shows life: a compiling unit's elapsed time ticks on a terminal, and without one each
running unit prints a heartbeat (label, phase, elapsed, the compiler's last line) at a fixed
interval; push and pull show bytes, rate and ETA on a terminal and keep --json stdout clean; a
store's retries say so on stderr instead of going silent."""

from __future__ import annotations

import contextlib
import fcntl
import io
import itertools
import json
import os
import pickle
import re
import select
import struct
import subprocess
import sys
import termios
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.demo.server import Child
from neuronbuild.engines.compiler import Failure
from neuronbuild.engines.neuron.engine import NeuronEngine
from neuronbuild.errors import StoreError
from neuronbuild.orchestrate import compile as build
from neuronbuild.orchestrate.compile import compile_recipe
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.transfer import copy_manifest
from neuronbuild.transports import retry
from neuronbuild.ui.progress import ByteProgress, Progress, last_line, retrying
from tests.conftest import (
    REPO,
    cpu_recipe,
    moto_s3,
    neuron_recipe,
    neuronbuild,
    publish_build,
    published_with_model,
    serve_without_vllm,
)
from tests.lib.claims import model_folder
from tests.lib.fake_compiler import FakeCompiler, use_fake_compiler
from tests.lib.faulty_proxy import FaultyProxy

BUCKETS = {"num_batched_tokens_buckets": [1024, 4096], "num_seqs_buckets": [1, 8]}
LABELS = [u.label() for u in build_plan(parse_recipe(neuron_recipe(BUCKETS))).units]
PREFILL, DECODE = LABELS  # "prefill (2 graphs)", "decode (2 graphs)"
BUCKET = "neuronbuild-liveness"
METER = partial(ByteProgress, stream=io.StringIO())
"""A copy's byte meter writing to a string (not a terminal), as the store's callers pass one."""


def on_terminal(
    argv: list[str], env: dict[str, str] | None = None, *, stdout_too: bool = True
) -> tuple[int, str, str]:
    """Run ``argv`` with stderr (and, with ``stdout_too``, stdout) on a pseudo-terminal 200
    columns wide, as in a user's shell. Returns the exit code, what the terminal showed and
    what went to stdout when it was a pipe."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    proc = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave if stdout_too else subprocess.PIPE,
        stderr=slave,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
        cwd=REPO,
    )
    os.close(slave)
    shown = bytearray()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every process holding the terminal has closed it
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    stdout = proc.stdout.read().decode() if proc.stdout is not None else ""
    code = proc.wait(timeout=10)
    return code, shown.decode(errors="replace"), stdout


# ``neuronbuild compile`` exactly as a user runs it, but each unit compiled by the fake compiler
# (tests/lib/fake_compiler.py): argv[1] maps graph labels to behaviours, as JSON.
COMPILE_WITH_FAKE = """
import json, sys
from neuronbuild.engines.neuron.engine import NeuronEngine
from tests.lib.fake_compiler import FakeCompiler, use_fake_compiler
from tests.lib.faulty_proxy import FaultyProxy
fake = FakeCompiler(json.loads(sys.argv[1]))
NeuronEngine.compiler = lambda self: fake
from neuronbuild.cli.main import main
sys.argv = ["neuronbuild", *sys.argv[2:]]
main()
"""


@pytest.fixture
def recipe(tmp_path: Path) -> Recipe:
    return parse_recipe(neuron_recipe(BUCKETS, name="live", model=str(model_folder(tmp_path))))


@pytest.fixture
def compiler(monkeypatch: pytest.MonkeyPatch) -> FakeCompiler:
    return use_fake_compiler(monkeypatch)


@pytest.mark.slow
def test_a_running_units_elapsed_time_ticks_on_a_terminal(tmp_path: Path) -> None:
    path = tmp_path / "live.yaml"
    data = neuron_recipe(BUCKETS, name="live", model=str(model_folder(tmp_path)))
    path.write_text(yaml.safe_dump(data))
    behaviour = {PREFILL: "sleep2.6", DECODE: "exit1"}
    argv = [sys.executable, "-c", COMPILE_WITH_FAKE, json.dumps(behaviour), "compile", str(path)]
    argv += ["--cache", str(tmp_path / "store"), "--log-dir", str(tmp_path / "logs"), "-j", "2"]
    code, shown, _ = on_terminal(argv)
    assert code == 1, shown  # decode failed
    # The bar's postfix names each running unit with its elapsed time, redrawn while it runs.
    ticks = re.findall(rf"running: [^\]\r\n]*?{re.escape(PREFILL)} (\d\d):(\d\d)", shown)
    seconds = [60 * int(m) + int(s) for m, s in ticks]
    assert len(set(seconds)) >= 2, shown  # not only the redraw when it started
    assert seconds == sorted(seconds)
    assert f"done     {PREFILL} (sha256:" in shown
    assert f"FAILED   {DECODE} (sha256:" in shown
    assert re.search(rf"\nFAILED {re.escape(DECODE)} \(sha256:\w+\): decode phase failed", shown)
    assert "\nrunning  " not in shown  # heartbeat lines are for logs, not terminals


@pytest.mark.slow
def test_without_a_terminal_each_running_unit_prints_a_heartbeat_at_the_set_interval(
    compiler: FakeCompiler, recipe: Recipe, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NEURONBUILD_HEARTBEAT_SECONDS", "0.5")
    compiler.behaviour = {DECODE: "sleep2.3", PREFILL: "exit1"}
    stream = io.StringIO()  # not a terminal, as a CI log
    store = Store(str(tmp_path / "store"), create=True)
    compile_recipe(
        recipe, store, jobs=2, log_dir=tmp_path / "logs", observe=lambda n: Progress(n, stream)
    )
    lines = stream.getvalue().splitlines()
    beats = [line for line in lines if f"running  {DECODE}:" in line]
    assert len(beats) >= 3, lines  # every 0.5 s of 2.3 s
    pattern = r"decode phase, (\d+\.\d) s so far; last line: compiling step (\d+)$"
    found = [re.search(pattern, beat) for beat in beats]
    assert all(found), beats
    elapsed = [float(m.group(1)) for m in found if m]
    steps = [int(m.group(2)) for m in found if m]
    assert all(0.35 <= b - a <= 0.9 for a, b in itertools.pairwise(elapsed)), elapsed
    assert 0.45 <= elapsed[0] <= 0.9, elapsed
    assert steps == sorted(steps) and steps[0] < steps[-1]  # the compiler's latest line, read live
    assert not any("\r" in line for line in lines)
    assert any(
        re.search(rf"done     {re.escape(DECODE)} \(sha256:\w+\) in 2\.\d s", x) for x in lines
    )
    assert any(
        line.startswith("[00:0") and f"FAILED   {PREFILL} (sha256:" in line for line in lines
    )


def test_a_unit_that_ends_before_the_interval_prints_no_heartbeat(
    compiler: FakeCompiler, recipe: Recipe, tmp_path: Path
) -> None:
    stream = io.StringIO()
    store = Store(str(tmp_path / "store"), create=True)
    compile_recipe(
        recipe, store, jobs=2, log_dir=tmp_path / "logs", observe=lambda n: Progress(n, stream)
    )
    text = stream.getvalue()
    assert "running  " not in text  # default interval: 60 s
    assert text.count("done     ") == 2


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["run", "dry-run"])
def test_a_heartbeat_interval_that_is_not_a_positive_number_is_refused(
    tmp_path: Path, dry_run: list[str]
) -> None:
    path = tmp_path / "live.yaml"
    path.write_text(yaml.safe_dump(neuron_recipe(BUCKETS, model=str(model_folder(tmp_path)))))
    argv = [sys.executable, "-c", COMPILE_WITH_FAKE, "{}", "compile", str(path), *dry_run]
    argv += ["--cache", str(tmp_path / "store"), "--log-dir", str(tmp_path / "logs")]
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "NEURONBUILD_HEARTBEAT_SECONDS": "0"},
    )
    assert result.returncode == 2, result.stderr
    assert "NEURONBUILD_HEARTBEAT_SECONDS" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_push_and_pull_show_bytes_and_rate_on_a_terminal_and_keep_json_stdout_clean(
    tmp_path: Path,
) -> None:
    store, digest = published_with_model(tmp_path)
    size = sum(f.size for f in store.get_manifest(digest).files())
    remote = str(tmp_path / "remote")
    push = [sys.executable, "-m", "neuronbuild", "push", "tiny/latest", "--from", store.url]
    code, shown, stdout = on_terminal([*push, "--cache", remote, "--json"], stdout_too=False)
    assert code == 0, shown
    assert re.search(rf"push: 100%\|[^\r\n]*\| {size / 1000:.2f}k/{size / 1000:.2f}k ", shown), (
        shown
    )
    assert re.search(r"\d[kMG]?B/s\]", shown), shown  # the rate, as tqdm shows it
    assert json.loads(stdout)["manifest"] == digest  # nothing of the bar on stdout

    pull = [sys.executable, "-m", "neuronbuild", "pull", "tiny/latest", "--cache", remote]
    code, shown, _ = on_terminal([*pull, "--local-cache", str(tmp_path / "node")])
    assert code == 0, shown
    assert re.search(r"pull: 100%\|[^\r\n]*\| [\d.]+k/[\d.]+k \[\d\d:\d\d<", shown), shown

    # Without a terminal: a start and a closing line, no carriage returns; stdout: the JSON.
    result = neuronbuild(*pull[3:], "--local-cache", str(tmp_path / "node2"), "--json")
    assert result.returncode == 0, result.stderr
    kb = f"{size / 1000:.1f} kB"
    start, end = result.stderr.splitlines()
    assert start == f"pull: 2 blobs, {kb} to copy" and "\r" not in result.stderr
    assert re.fullmatch(rf"pull: {kb} of {kb} in [\d.]+ s, [\d.]+ [kMG]?B/s", end), end
    assert json.loads(result.stdout)["manifest"] == digest


def test_serves_fetch_into_the_local_tier_shows_its_bytes(tmp_path: Path) -> None:
    store, digest = published_with_model(tmp_path)
    node, root = tmp_path / "node", tmp_path / "root"
    served = serve_without_vllm(
        "--manifest", digest, "--cache", store.url, "--local-cache", str(node),
        "--vllm-cache-root", str(root),
    )  # fmt: skip
    assert served.returncode == 0, served.stderr
    assert "fetch: 2 blobs, 8.0 kB to copy\n" in served.stderr


@pytest.mark.slow
def test_byte_progress_without_a_terminal_prints_bytes_rate_and_eta_at_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEURONBUILD_HEARTBEAT_SECONDS", "0.3")
    stream = io.StringIO()
    meter = ByteProgress("pull", 3_000_000, 3, stream)
    for _ in range(3):
        time.sleep(0.4)
        meter.advance(500_000)
    meter.close()
    first, *lines, last = stream.getvalue().splitlines()
    assert first == "pull: 3 blobs, 3.0 MB to copy"
    assert re.fullmatch(r"pull: 1\.5 MB of 3\.0 MB in 1\.\d s, [\d.]+ (kB|MB)/s", last), last
    assert 3 <= len(lines) <= 5, lines
    size = r"[\d.]+ (B|kB|MB)"
    pattern = rf"pull: {size} of 3\.0 MB \((\d+)%\), {size}/s(, about [\d.]+ s left)?"
    found = [re.fullmatch(pattern, line) for line in lines]
    assert all(found), lines
    percents = [int(m.group(2)) for m in found if m]
    assert percents == sorted(percents) and percents[-1] in (33, 50), lines
    assert any(m.group(4) for m in found if m), lines  # an ETA once bytes moved


def test_quiet_byte_progress_in_a_log_keeps_only_its_periodic_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from neuronbuild.ui import verbosity

    monkeypatch.setattr(verbosity, "_verbosity", verbosity.QUIET)
    monkeypatch.setenv("NEURONBUILD_HEARTBEAT_SECONDS", "0.2")
    stream = io.StringIO()
    meter = ByteProgress("pull", 2_000_000, 2, stream)
    meter.advance(1_000_000)
    time.sleep(0.5)
    meter.close()
    lines = stream.getvalue().splitlines()
    assert lines and all(line.startswith("pull: 1.0 MB of 2.0 MB (50%)") for line in lines), lines


def test_byte_progress_never_passes_the_total_when_a_blob_is_sent_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEURONBUILD_HEARTBEAT_SECONDS", "60")
    stream = io.StringIO()
    meter = ByteProgress("push", 1_000_000, 1, stream)
    meter.advance(1_000_000)
    meter.advance(1_000_000)  # the upload again: its stored size differed
    meter._report()
    meter.close()
    assert meter.moved == 1_000_000
    _, report, last = stream.getvalue().splitlines()
    assert report.startswith("push: 1.0 MB of 1.0 MB (100%)"), report
    assert last.startswith("push: 1.0 MB of 1.0 MB in "), last


def test_byte_progress_takes_back_the_bytes_of_a_refused_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NEURONBUILD_HEARTBEAT_SECONDS", "60")
    meter = ByteProgress("push", 1_000_000, 1, io.StringIO())
    meter.advance(600_000)
    meter.advance(-600_000)  # a registry refused the body (413): sent again in chunks
    assert meter.moved == 0
    meter.advance(-5)
    assert meter.moved == 0
    meter.close()


Behind = Callable[..., contextlib.AbstractContextManager[FaultyProxy]]


@pytest.fixture(scope="module")
def moto_port() -> Iterator[int]:
    """A moto S3 server holding :data:`BUCKET` for the module (its environment set here)."""
    with moto_s3(BUCKET) as env:
        yield int(env["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])


@pytest.fixture
def s3_behind(moto_port: int, monkeypatch: pytest.MonkeyPatch) -> Behind:
    """A context manager: the moto server reached through a fault-injecting proxy
    (tests/lib/faulty_proxy.py, its settings as arguments) by every store made inside; store
    retries wait 0.05 s, not 1 s."""
    import s3fs

    monkeypatch.setattr(retry, "BASE_SECONDS", 0.05)

    @contextlib.contextmanager
    def behind(**settings: Any) -> Iterator[FaultyProxy]:
        with FaultyProxy(moto_port, **settings) as proxy, monkeypatch.context() as patch:
            patch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{proxy.port}")
            s3fs.S3FileSystem.clear_instance_cache()  # none may keep moto's own address
            try:
                yield proxy
            finally:
                s3fs.S3FileSystem.clear_instance_cache()

    return behind


RETRY_LINE = (
    r"retrying \(([2-5])/5\) in \d+\.\d s: (\w+): "
    r"HTTP 500 (?:InternalError \(injected\)|\(Internal Server Error\))"  # a HEAD has no body
)


@pytest.mark.slow
def test_a_store_fault_is_retried_and_each_retry_says_so_on_stderr(
    s3_behind: Behind,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    with s3_behind(fail_every=3) as proxy:
        store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}")
        model = model_folder(tmp_path)
        data = cpu_recipe(name="retried", cpu_isa="host", model=str(model))
        digest = publish_build(store, data, tmp_path, "a")
        assert store.get_ref("retried", "latest") == digest
        assert proxy.failed >= 3
    lines = [line for line in capfd.readouterr().err.splitlines() if "retrying" in line]
    assert len(lines) == proxy.failed, lines  # every injected fault is told, once
    found = [re.fullmatch(RETRY_LINE, line) for line in lines]
    assert all(found), lines
    assert {"PutObject", "HeadObject"} <= {m.group(2) for m in found if m}, lines


@pytest.mark.slow
def test_a_persistent_store_fault_reports_each_retry_then_fails(
    s3_behind: Behind,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    with s3_behind() as proxy:
        proxy.down = True
        with pytest.raises(StoreError, match="injected"):
            Store(f"s3://{BUCKET}/down")
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "retrying" in line]
    found = [re.fullmatch(RETRY_LINE, line) for line in lines]
    assert [m.group(1) for m in found if m] == ["2", "3", "4", "5"], err


@pytest.mark.slow
def test_a_request_that_times_out_is_tried_five_times_not_twenty_five(
    s3_behind: Behind, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # s3fs's own silent loop (5 attempts) around botocore's would make each timeout 5 x 5.
    monkeypatch.setenv("NEURONBUILD_S3_READ_TIMEOUT", "0.3")
    with (
        s3_behind(stall_every=1, stall_seconds=1.0) as proxy,
        pytest.raises(StoreError, match="timeout"),
    ):
        Store(f"s3://{BUCKET}/stalled")
    assert proxy.requests == 1 + retry.ATTEMPTS  # the single-attempt probe, then one request
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if "retrying" in line]
    assert [line[:14] for line in lines] == [f"retrying ({n}/5)" for n in (2, 3, 4, 5)], err


@pytest.mark.slow
def test_a_body_cut_mid_read_is_read_again_and_says_so(
    s3_behind: Behind, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    local, digest = published_with_model(tmp_path)
    url = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
    with s3_behind():
        copy_manifest(local, Store(url), digest, progress=METER, what="push")
    capfd.readouterr()
    with s3_behind(cut_every=2) as proxy:
        node = Store(str(tmp_path / "node"), create=True)
        copy_manifest(Store(url), node, digest, progress=METER, what="pull")
        assert proxy.cut >= 2
    assert node.get_manifest(digest) == local.get_manifest(digest)
    lines = [line for line in capfd.readouterr().err.splitlines() if "retrying" in line]
    assert len(lines) == proxy.cut, lines
    # Each names the object read, or the request (a listing, e.g. of the manifest's attestations).
    named = rf"retrying \([2-5]/5\) in \d+\.\d s: (s3://{BUCKET}/|ListObjectsV2: )"
    assert all(re.match(named, x) for x in lines), lines


@pytest.mark.slow
def test_byte_progress_counts_every_byte_of_an_upload_to_s3_and_a_download_from_it(
    s3_behind: Behind, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[int] = []
    advance = ByteProgress.advance

    def counting(self: ByteProgress, n_bytes: int) -> None:
        counted.append(n_bytes)
        advance(self, n_bytes)

    monkeypatch.setattr(ByteProgress, "advance", counting)
    local, digest = published_with_model(tmp_path)
    size = sum(f.size for f in local.get_manifest(digest).files())
    with s3_behind():
        remote = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}")
        copy_manifest(local, remote, digest, progress=METER, what="push")
        assert sum(counted) == size  # the upload leg (s3fs's callback)
        counted.clear()
        node = Store(str(tmp_path / "node"), create=True)
        copy_manifest(remote, node, digest, progress=METER, what="pull")
        assert sum(counted) == size  # the download leg, as it is verified


class TransientFailures(FakeCompiler):
    """Every failed run reads as a transient one (as neuronx-cc's bare exit 70 does)."""

    def classify(self, exit_code: int, log: str) -> Failure:
        return Failure(f"neuronx-cc compilation failed with {exit_code}", "backoff")


def test_an_engine_retry_says_so_on_stderr(
    recipe: Recipe,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    fake = TransientFailures({PREFILL: "exit70"})
    monkeypatch.setattr(NeuronEngine, "compiler", lambda self: fake)
    monkeypatch.setattr(build, "RETRY_BACKOFF_SECONDS", 0.1)
    store = Store(str(tmp_path / "store"), create=True)
    report = compile_recipe(recipe, store, log_dir=tmp_path / "logs", stream=io.StringIO())
    assert fake.started.count(PREFILL) == 2 and report.failed == 1
    lines = [line for line in capfd.readouterr().err.splitlines() if "retrying" in line]
    assert lines == [f"retrying (2/2) in 0.1 s: {PREFILL}: neuronx-cc compilation failed with 70"]


def test_a_store_sent_to_another_process_still_retries_and_reports(
    s3_behind: Behind, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import s3fs

    with s3_behind(fail_every=2) as proxy:
        store = Store(f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}")
        sent = pickle.dumps(store)  # as a Ray task receives it
        s3fs.S3FileSystem.clear_instance_cache()  # another process: a client of its own
        received = pickle.loads(sent)
        assert received.backend.fs is not store.backend.fs
        for i in range(4):
            received.backend.put(received.layout.tmp(f"probe-{i}"), b"x")
        assert proxy.failed >= 2
    lines = [line for line in capfd.readouterr().err.splitlines() if "retrying" in line]
    assert len(lines) == proxy.failed, lines


def test_one_log_tail_reader_shows_what_a_terminal_showed_last(tmp_path: Path) -> None:
    from neuronbuild.ui.logtail import tail_lines

    log = tmp_path / "unit.log"
    bar = "".join(f"\r\x1b[32m{p:3d}%\x1b[0m |###|" for p in (10, 50, 100))  # a redrawn bar
    log.write_bytes(b"x" * 100_000 + f"\nfirst\n\n{bar}\nlowering prefill\r\n".encode())
    shown = ["first", " 10% |###|", " 50% |###|", "100% |###|", "lowering prefill"]
    assert tail_lines(log, 5) == shown  # each redraw a line, colours gone
    cut, *_ = tail_lines(log, 6)
    assert set(cut) == {"x"} and len(cut) < 64 * 1024  # only the end of a large log is read
    assert last_line(log) == "lowering prefill"  # a heartbeat's last compiler line
    assert Child(["true"], log).tail(2) == "100% |###|\nlowering prefill"  # the demo's errors
    assert tail_lines(None) == [] and last_line(tmp_path / "gone.log") is None


def test_a_retry_without_a_wait_says_now(capfd: pytest.CaptureFixture[str]) -> None:
    retrying(2, 3, 0.0, "s3://b/blobs/x: the stored size differs from 5 bytes")
    retrying(2, 5, 1.6, "PutObject: HTTP 503")
    assert capfd.readouterr().err.splitlines() == [
        "retrying (2/3) now: s3://b/blobs/x: the stored size differs from 5 bytes",
        "retrying (2/5) in 1.6 s: PutObject: HTTP 503",
    ]


def test_a_ref_move_that_lost_a_race_says_it_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    store, digest = published_with_model(tmp_path)
    other = publish_build(store, cpu_recipe(name="tiny", cpu_isa="host", seed=7), tmp_path, "b")
    move = Store.move_ref
    raced: list[str] = []

    def overtaken(
        self: Store, name: str, tag: str, to: str, expected: str | None, check: object = None
    ) -> str | None:
        if not raced:  # another builder moves the ref between our read and our swap
            raced.append(to)
            move(self, name, tag, other, expected)
        return move(self, name, tag, to, expected)

    monkeypatch.setattr(Store, "move_ref", overtaken)
    store.set_ref("tiny", "prod", digest)
    assert store.get_ref("tiny", "prod") == digest
    [line] = [line for line in capfd.readouterr().err.splitlines() if "retrying" in line]
    assert re.fullmatch(
        r"retrying \(2/5\) in 0\.1 s: tiny/prod points at sha256:\w+, not None", line
    )


@pytest.mark.slow
def test_quiet_shows_no_progress_on_a_terminal_or_in_a_log(tmp_path: Path) -> None:
    path = tmp_path / "live.yaml"
    data = neuron_recipe(BUCKETS, name="live", model=str(model_folder(tmp_path)))
    path.write_text(yaml.safe_dump(data))
    behaviour = json.dumps({PREFILL: "sleep1.2", DECODE: "sleep1.2"})
    argv = [sys.executable, "-c", COMPILE_WITH_FAKE, behaviour, "-q", "compile", str(path)]
    argv += ["--cache", str(tmp_path / "store"), "--log-dir", str(tmp_path / "logs")]
    code, shown, _ = on_terminal([*argv, "-j", "2"])
    assert code == 0, shown
    assert "compile:" not in shown and "started" not in shown, shown
    argv[-1] = str(tmp_path / "logs2")
    logged = subprocess.run(
        [*argv, "--cache", str(tmp_path / "other")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "NEURONBUILD_HEARTBEAT_SECONDS": "0.3"},
    )
    assert logged.returncode == 0, logged.stderr
    # In a log (CI, where -q is used) the heartbeats stay: a silent job gets killed.
    assert "started" not in logged.stderr and "done" not in logged.stderr, logged.stderr
    assert re.search(r"running  (prefill|decode) \(2 graphs\): .* so far", logged.stderr)
