"""Issue 20, "Nodes": a node's own mistakes are found before any byte moves. A local model folder
missing here is named with where serve looked and ``--workdir``, never sent to the hub; the dry
run's pasteable vLLM line says what to run first on a fresh node; a read-only layout root or
local tier, a busy port and a host that is not this node's exit 2 in one line, by the dry run too,
with no blob fetched."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from neuronbuild.errors import message_lines
from neuronbuild.store.cas import Store
from neuronbuild_runtime import node_config
from tests.conftest import cpu_recipe, publish_build, serve_without_vllm
from tests.lib.faults import can_mount, in_mounts, read_only_bind

API_SERVER = "vllm.entrypoints.openai.api_server"
needs_mounts = pytest.mark.skipif(not can_mount(), reason="no private mount namespace here")


def built(tmp_path: Path) -> tuple[Path, Path]:
    """The README's build: ``model: tiny-llama`` beside its recipe in ``build/``, published to
    a folder store. Returns (the build folder, the store)."""
    folder = tmp_path / "build"
    (folder / "tiny-llama").mkdir(parents=True)
    (folder / "tiny-llama" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    data = cpu_recipe(cpu_isa="host", model="tiny-llama")
    recipe = folder / "r.yaml"
    recipe.write_text(json.dumps(data))
    store = tmp_path / "store"
    publish_build(Store(str(store), create=True), data, tmp_path, "a", source=str(recipe))
    return folder, store


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    return line


def test_a_local_model_missing_on_the_node_names_the_folder_and_workdir_not_the_hub(
    tmp_path: Path,
) -> None:
    _, store = built(tmp_path)
    node = tmp_path / "node"
    node.mkdir()
    result = serve_without_vllm("--ref", "tiny/latest", "--cache", str(store), cwd=node)
    line = one_line(result)
    assert "huggingface-cli" not in line
    assert f"{node / 'tiny-llama'} does not exist on this node" in line
    assert "pass --workdir with the folder that holds tiny-llama" in line


# The pasteable line: on a fresh node it needs a lay-out, and the dry run says how to get one.

PROBE = (
    '-c \'import json, os, sys; root = os.environ["VLLM_CACHE_ROOT"]; '
    'missing = [p for p in json.loads(os.environ["NEEDS"]) '
    "if not os.path.isfile(os.path.join(root, p))]; "
    'sys.exit(f"AOT load failed: {missing}" if missing else 0)\''
)
"""vLLM's AOT load under ``VLLM_FORCE_AOT_LOAD=1``, reduced to what fails it: a file of the
manifest missing under ``$VLLM_CACHE_ROOT`` (``NEEDS``: their paths)."""


def paste(command: str, needs: list[str]) -> subprocess.CompletedProcess[str]:
    pasted = command.replace(f"-m {API_SERVER}", PROBE)
    assert pasted != command
    env = {"NEEDS": json.dumps(needs), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["bash", "-c", pasted], env=env, capture_output=True, text=True)


def test_the_dry_run_on_a_fresh_node_says_what_to_run_before_its_pasteable_line(
    tmp_path: Path,
) -> None:
    folder, store = built(tmp_path)
    root = tmp_path / "fresh-root"
    args = ("--ref", "tiny/latest", "--cache", str(store), "--workdir", str(folder))
    args += ("--vllm-cache-root", str(root))
    dry = serve_without_vllm(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    *_, label, command = dry.stdout.strip().splitlines()
    assert "first run this serve command with --layout-only instead of --dry-run" in label
    needs = [f.path for f in Store(str(store)).get_manifest(
        json.loads(serve_without_vllm(*args, "--dry-run", "--json").stdout)["manifest"]
    ).files()]  # fmt: skip
    assert paste(command, needs).returncode != 0  # as the label says: not yet
    laid = serve_without_vllm(*args, "--layout-only")
    assert laid.returncode == 0, laid.stderr
    assert laid.stdout.strip().splitlines()[-1] == command
    ran = paste(command, needs)
    assert ran.returncode == 0, ran.stderr
    again = serve_without_vllm(*args, "--dry-run", "--json")
    assert json.loads(again.stdout)["laid_out"] is True
    assert serve_without_vllm(*args, "--dry-run").stdout.strip().splitlines()[-2] == "would run:"


# The node's settings: exit 2, one line, before any blob is fetched, by the dry run too.


def fetched(tier: Path) -> list[Path]:
    return sorted((tier / "blobs").rglob("*")) if (tier / "blobs").exists() else []


@needs_mounts
@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
def test_a_read_only_layout_root_exits_2_naming_the_setting_before_fetching(
    tmp_path: Path, dry_run: tuple[str, ...]
) -> None:
    folder, store = built(tmp_path)
    ro, tier = tmp_path / "ro", tmp_path / "tier"
    ro.mkdir()
    args = ("serve", "--ref", "tiny/latest", "--cache", str(store), "--workdir", str(folder))
    args += ("--local-cache", str(tier), *dry_run)
    via_option = in_mounts(read_only_bind(ro), *args, "--vllm-cache-root", str(ro / "root"))
    line = one_line(via_option)
    assert line.startswith(f"error: layout root {ro / 'root'}: "), line
    assert "Read-only file system" in line and "pass --vllm-cache-root" in line
    via_env = in_mounts(read_only_bind(ro), *args, env={"VLLM_CACHE_ROOT": str(ro)})
    assert "set VLLM_CACHE_ROOT to a folder this node may write" in one_line(via_env)
    assert fetched(tier) == []


@needs_mounts
def test_a_read_only_local_tier_lacking_blobs_exits_2_before_fetching(tmp_path: Path) -> None:
    folder, store = built(tmp_path)
    tier = tmp_path / "tier"
    Store(str(tier), create=True)
    args = ("serve", "--ref", "tiny/latest", "--cache", f"file://{store}", "--workdir", str(folder))
    args += ("--local-cache", str(tier), "--vllm-cache-root", str(tmp_path / "root"))
    line = one_line(in_mounts(read_only_bind(tier), *args))
    assert line.startswith(f"error: local tier {tier}/tmp: "), line
    assert "pass --local-cache with a folder this node may write" in line
    assert fetched(tier) == []


@pytest.fixture
def busy_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize("dry_run", [(), ("--dry-run",)])
def test_a_port_in_use_exits_2_in_one_line_before_any_blob_is_fetched(
    tmp_path: Path, busy_port: int, dry_run: tuple[str, ...]
) -> None:
    folder, store = built(tmp_path)
    tier = tmp_path / "tier"
    result = serve_without_vllm(
        "--ref", "tiny/latest", "--cache", f"file://{store}", "--local-cache", str(tier),
        "--workdir", str(folder), "--vllm-cache-root", str(tmp_path / "root"),
        "--port", str(busy_port), *dry_run,
    )  # fmt: skip
    line = one_line(result)
    assert f"--port {busy_port} is in use on this node (0.0.0.0:{busy_port})" in line
    assert fetched(tier) == [] and not (tmp_path / "root").exists()


def test_vllms_default_port_in_use_is_named_as_the_default_with_the_option_to_pass(
    busy_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_config, "DEFAULT_PORT", busy_port)  # not 8000: other tests use it
    with pytest.raises(node_config.NodeConfigInvalid) as caught:
        node_config.check_listen(["--model", "m"])  # no --port: serve --dry-run's default
    [line] = message_lines(caught.value)
    assert line.startswith(f"error: port {busy_port} (vLLM's default; pass --port) is in use "), (
        line
    )
    with pytest.raises(node_config.NodeConfigInvalid) as caught:
        node_config.check_listen(["--port", str(busy_port)])
    assert str(caught.value).startswith(f"--port {busy_port} is in use on this node")


def test_a_port_in_the_recipes_serve_section_is_checked_too(tmp_path: Path, busy_port: int) -> None:
    store = tmp_path / "store"
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    data = cpu_recipe(cpu_isa="host", model=str(model), serve={"port": busy_port})
    publish_build(Store(str(store), create=True), data, tmp_path, "a")
    result = serve_without_vllm("--ref", "tiny/latest", "--cache", str(store), "--dry-run")
    assert f"--port {busy_port} is in use on this node" in one_line(result)
    free = serve_without_vllm("--ref", "tiny/latest", "--cache", str(store), "--dry-run",
                              "--port", "0")  # fmt: skip
    assert free.returncode == 0, free.stderr  # the last --port wins, as in vLLM's parser


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--host", "192.0.2.7", "--host 192.0.2.7: vLLM cannot listen on 192.0.2.7:8000"),
        ("--host", "no-such-host.invalid", "--host no-such-host.invalid: vLLM cannot listen"),
        ("--port", "http", "--port http: not a port number"),
        ("--port", "70000", "--port 70000: not a port number"),
    ],
)
def test_an_address_this_node_cannot_listen_on_is_one_line_by_the_dry_run(
    tmp_path: Path, option: str, value: str, says: str
) -> None:
    folder, store = built(tmp_path)
    result = serve_without_vllm(
        "--ref", "tiny/latest", "--cache", str(store), "--workdir", str(folder), "--dry-run",
        option, value,
    )  # fmt: skip
    assert says in one_line(result)


def test_a_unix_socket_is_not_taken_for_a_port(tmp_path: Path, busy_port: int) -> None:
    folder, store = built(tmp_path)
    result = serve_without_vllm(
        "--ref", "tiny/latest", "--cache", str(store), "--workdir", str(folder), "--dry-run",
        "--port", str(busy_port), "--uds", str(tmp_path / "s.sock"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr  # vLLM binds the socket file, not the port


# pull: the same node settings, the same one line (issue 20: a read-only tier exited 3, retried).


@needs_mounts
@pytest.mark.parametrize("fresh", [False, True], ids=["an-empty-tier", "a-tier-to-create"])
def test_a_pull_into_a_read_only_local_tier_exits_2_naming_local_cache_before_fetching(
    tmp_path: Path, fresh: bool
) -> None:
    _, store = built(tmp_path)
    ro = tmp_path / "ro"
    tier = ro / "tier" if fresh else ro
    if not fresh:
        Store(str(tier), create=True)
    ro.mkdir(exist_ok=True)
    args = ("pull", "tiny/latest", "--cache", str(store), "--local-cache", str(tier))
    line = one_line(in_mounts(read_only_bind(ro), *args))
    probed = tier if fresh else tier / "tmp"
    assert line.startswith(f"error: local tier {probed}: cannot write in {ro} "), line
    assert "Read-only file system" in line
    assert "pass --local-cache with a folder this node may write" in line
    assert fetched(tier) == []


@needs_mounts
def test_a_pull_writing_only_a_ref_into_a_read_only_tier_exits_2(tmp_path: Path) -> None:
    _, store = built(tmp_path)
    tier = tmp_path / "tier"
    digest = Store(str(store)).resolve("tiny/latest")
    by_digest = ("pull", digest, "--cache", str(store), "--local-cache", str(tier))
    assert in_mounts([], *by_digest).returncode == 0  # every blob, but no ref
    args = ("pull", "tiny/latest", "--cache", str(store), "--local-cache", str(tier))
    line = one_line(in_mounts(read_only_bind(tier), *args))
    assert line.startswith(f"error: local tier {tier}/tmp: "), line
    assert "pass --local-cache" in line
    assert in_mounts(read_only_bind(tier), *by_digest).returncode == 0  # nothing to write


@needs_mounts
def test_a_pull_writing_a_missing_unit_record_into_a_read_only_tier_exits_2(
    tmp_path: Path,
) -> None:
    """The tier holds the manifest and every blob but lacks a unit record: the early check sees
    nothing to write, the copy writes the record, and the read-only tier is the same one line,
    exit 2, not a store fault."""
    _, store = built(tmp_path)
    tier = tmp_path / "tier"
    digest = Store(str(store)).resolve("tiny/latest")
    args = ("pull", digest, "--cache", str(store), "--local-cache", str(tier))
    assert in_mounts([], *args).returncode == 0
    records = sorted(p for p in (tier / "units").rglob("*") if p.is_file())
    assert records
    records[0].unlink()
    result = in_mounts(read_only_bind(tier), *args)
    assert result.returncode == 2, result.stderr
    line = one_line(result)
    assert line.startswith(f"error: local tier {tier}/tmp: "), line
    assert "pass --local-cache" in line
