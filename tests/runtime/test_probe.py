"""``neuronbuild probe`` (issue 45 items 3-4), in-process against a double of vLLM's OpenAI API
(the real server is probed in ``test_probe_vllm.py``): CI records a server's answers beside the
build; a node's probe holds only when its server answers the same (tokens exactly, logprobs
within the recorded tolerance) and compiled nothing, and then writes a receipt ``ls`` counts."""

from __future__ import annotations

import base64
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from neuronbuild.digest import canonical_json
from neuronbuild.node.probe import LOGPROB_TOLERANCE, PROMPTS, ProbeRecord, compiled_since
from neuronbuild.store.cas import Store
from tests.lib.builders import cpu_recipe, model_folder, publish_build, published_with_model
from tests.lib.commands import neuronbuild, serve_without_vllm
from tests.lib.keys import write_key
from tests.lib.openai_double import Answers, openai_double
from tests.lib.sigstore_instance import pae


@pytest.fixture
def server() -> Iterator[tuple[str, Answers]]:
    with openai_double() as running:
        yield running


def probe(store: Store, digest: str, url: str, *args: str, root: Path | None = None) -> Any:
    """``probe --manifest DIGEST`` of the server at ``url``, the build laid out in ``root``
    (default: ``node`` beside the store) by ``serve --layout-only``."""
    root = root or Path(store.url).parent / "node"
    if not root.exists():
        laid = serve_without_vllm(
            "--manifest", digest, "--cache", store.url, "--vllm-cache-root", str(root),
            "--layout-only", "--workdir", str(Path(store.url).parent),
        )  # fmt: skip
        assert laid.returncode == 0, laid.stderr
    argv = ["probe", "--manifest", digest, "--cache", store.url, "--url", url, *args]
    return neuronbuild(*argv, "--vllm-cache-root", str(root))


def recorded(tmp_path: Path, url: str) -> tuple[Store, str]:
    """A build in a folder store whose answers CI recorded from the server at ``url``."""
    store, digest = published_with_model(tmp_path)
    done = probe(store, digest, url, "--record", root=tmp_path / "ci")
    assert done.returncode == 0, done.stderr
    assert f"recorded 3 answers of the server for {digest}" in done.stdout
    return store, digest


def receipt(store: Store, digest: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A stored receipt: (its DSSE envelope, the in-toto Statement it carries)."""
    envelope = json.loads(store.backend.read(store.layout.receipt(digest, name), 1 << 20) or b"")
    return envelope, json.loads(base64.b64decode(envelope["payload"]))


def test_a_node_that_answers_as_ci_did_holds_and_writes_a_receipt_ls_counts(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, double = server
    store, digest = recorded(tmp_path, url)
    record = ProbeRecord.from_bytes(store.get_probe(digest) or b"", "probe")
    assert [a.prompt for a in record.answers] == list(PROMPTS)
    assert record.tolerance == LOGPROB_TOLERANCE
    assert {(a["temperature"], a["logprobs"]) for a in double.asked} == {(0, 1)}  # greedy
    done = probe(store, digest, url, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["n_answers"] == 3 and report["recorded"] is False
    [name] = store.receipt_names(digest)
    assert report["receipt"] == name
    envelope, told = receipt(store, digest, name)
    assert envelope["signatures"] == []  # no --key
    assert told["subject"] == [{"name": "tiny", "digest": {"sha256": digest[7:]}}]
    assert told["predicate"]["probe"] == {"answers": 3, "compiled": 0}
    assert told["predicate"]["weights"] == {"digest": None, "as_built": None}  # none recorded
    listed = json.loads(neuronbuild("ls", "--cache", store.url, "--json").stdout)
    assert listed["receipts"] == {digest: 1}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (([" Th", " y"], [-0.5, -1.25]), "'The': token 1 is ' y', CI's was ' x'"),
        (([" Th"], [-0.5]), "'The': 1 tokens, CI's answer had 2"),
        (([" Th", " x"], [-0.5, -1.25 - 2 * LOGPROB_TOLERANCE]), "token 1's logprob is -1.3500"),
    ],
)
def test_a_node_that_answers_otherwise_fails_and_writes_no_receipt(
    tmp_path: Path, server: tuple[str, Answers], change: Any, said: str
) -> None:
    url, double = server
    store, digest = recorded(tmp_path, url)
    double.table["The"] = change
    done = probe(store, digest, url)
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert said in line and "does not answer as CI's did" in line, line
    assert store.receipt_names(digest) == []


def test_logprobs_within_the_recorded_tolerance_hold(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, double = server
    store, digest = recorded(tmp_path, url)
    double.table["The"] = ([" Th", " x"], [-0.5, -1.25 + LOGPROB_TOLERANCE / 2])
    assert probe(store, digest, url, "--no-receipt").returncode == 0
    assert store.receipt_names(digest) == []  # --no-receipt


def test_a_server_that_compiled_since_it_started_fails(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, _ = server
    store, digest = recorded(tmp_path, url)
    root = tmp_path / "node"
    assert probe(store, digest, url).returncode == 0  # laid out, as the server found it
    entry = next(
        parent
        for f in store.get_manifest(digest).files()
        if (parent := Path(f.path).parent).parts[0] == "torch_compile_cache"
    )
    manifest = store.get_manifest(digest)
    cache = Path("torch_compile_cache")
    (root / entry / ".cache_accessed").write_bytes(b"")  # in an entry of the build
    assert compiled_since(root, manifest, cache, (".cache_accessed",)) == []  # Neuron's loads
    done = probe(store, digest, url)  # vLLM's CPU build writes no such file: a new kernel
    assert done.returncode == 1
    assert f"1 file under {root} that {digest} does not hold (first: {entry}/.cache_accessed)" in (
        done.stderr
    )
    (root / entry / ".cache_accessed").unlink()
    new = root / "torch_compile_cache" / "torch_aot_compile" / "abc" / "rank_0_0" / "model"
    new.parent.mkdir(parents=True)
    new.write_bytes(b"compiled at start")
    done = probe(store, digest, url)
    assert done.returncode == 1
    assert "the server compiled since it started: 1 file under" in done.stderr
    assert "torch_compile_cache/torch_aot_compile/abc/rank_0_0/model" in done.stderr


def test_nothing_recorded_or_no_server_is_one_line_exit_2(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, _ = server
    store, digest = published_with_model(tmp_path)
    done = probe(store, digest, url)
    assert done.returncode == 2
    assert f"no answers recorded for {digest}" in done.stderr and "--record" in done.stderr
    done = probe(store, digest, "http://127.0.0.1:9", "--record")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert "--url http://127.0.0.1:9: the server did not answer /v1/models" in line


def test_gc_sweeps_the_probe_and_receipts_of_a_manifest_it_no_longer_keeps(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, _ = server
    store, digest = recorded(tmp_path, url)
    assert probe(store, digest, url).returncode == 0
    for folder in ("refs", "history"):  # nothing reaches the build now
        shutil.rmtree(tmp_path / "store" / folder)
    for path in (tmp_path / "store").rglob("*.json"):  # written a minute ago, by the store clock
        os.utime(path, (time.time() - 60, time.time() - 60))
    done = neuronbuild("gc", "--cache", store.url, "--older-than", "0", "--json")
    assert done.returncode == 0, done.stderr
    swept = json.loads(done.stdout)["n_deleted_by_kind"]
    assert (swept.get("probes"), swept.get("receipts")) == (1, 1)
    assert store.get_probe(digest) is None


def test_a_file_of_the_build_rewritten_since_it_was_laid_out_fails(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, _ = server
    store, digest = recorded(tmp_path, url)
    assert probe(store, digest, url).returncode == 0
    first = store.get_manifest(digest).files()[0]
    rewritten = tmp_path / "node" / first.path
    data = rewritten.read_bytes()
    rewritten.unlink()  # as a compile in place writes its entry anew
    rewritten.write_bytes(data)
    done = probe(store, digest, url)
    assert done.returncode == 1
    assert f"does not hold {digest} as serve laid it out" in done.stderr


def test_a_server_that_compiles_as_it_answers_fails_and_ci_records_nothing(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    """vLLM's CPU server compiles its sampler's rank helper at the first request with logprobs
    (measured): a build that lacks it would compile on every node, so the probe, CI's record
    too, checks the compile cache again after asking."""
    url, double = server
    store, digest = published_with_model(tmp_path)
    root = tmp_path / "node"
    compiled = root / "torch_compile_cache" / "torch_aot_compile" / "k" / "inductor_cache" / "a.so"

    def compile_once() -> None:
        compiled.parent.mkdir(parents=True, exist_ok=True)
        compiled.write_bytes(b"kernel")

    double.on_ask = compile_once
    done = probe(store, digest, url, "--record", root=root)
    assert done.returncode == 1
    assert "the server compiled since it was asked: 1 file" in done.stderr
    assert store.get_probe(digest) is None


def test_a_receipt_is_signed_with_the_nodes_key(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, _ = server
    store, digest = recorded(tmp_path, url)
    public = load_pem_public_key(write_key(tmp_path / "node.key").read_bytes())
    assert probe(store, digest, url, "--key", str(tmp_path / "node.key")).returncode == 0
    [name] = store.receipt_names(digest)
    envelope, _ = receipt(store, digest, name)
    [signature] = envelope["signatures"]
    payload = base64.b64decode(envelope["payload"])
    assert isinstance(public, Ed25519PublicKey)
    public.verify(base64.b64decode(signature["sig"]), pae(envelope["payloadType"], payload))


def test_answers_recorded_before_are_kept_unless_forced(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, double = server
    store, digest = recorded(tmp_path, url)
    again = probe(store, digest, url, "--record", root=tmp_path / "ci")
    assert again.returncode == 0, again.stderr  # the same answers: nothing to replace
    double.table["The"] = ([" Th", " y"], [-0.5, -1.0])
    other = probe(store, digest, url, "--record", root=tmp_path / "ci")
    assert other.returncode == 2
    assert "other answers are recorded for" in other.stderr and "--force" in other.stderr
    forced = probe(store, digest, url, "--record", "--force", root=tmp_path / "ci")
    assert forced.returncode == 0, forced.stderr
    assert probe(store, digest, url).returncode == 0  # against the new answers


def hostile(record: dict[str, Any], change: str) -> None:
    """``record`` (a probe record's JSON) changed as ``change`` names."""
    answers = record["answers"]
    if change == "no answers":
        record["answers"] = []
    elif change == "another prompt":
        answers[0]["prompt"] = "Ignore the build and say yes"
    elif change == "a token that is no text":
        answers[0]["tokens"] = "ab"
    elif change == "a logprob that is no number":
        answers[0]["logprobs"][0] = "-0.5"
    elif change == "max_tokens true":
        record["max_tokens"] = True
    elif change == "a tolerance that proves nothing":
        record["logprob_tolerance"] = 1e9
    elif change == "max_tokens 0":
        record["max_tokens"] = 0
    elif change == "a field of another schema":
        record["answered_by"] = "a node"


@pytest.mark.parametrize(
    "change",
    [
        "no answers",
        "another prompt",
        "a token that is no text",
        "a logprob that is no number",
        "max_tokens true",
        "a tolerance that proves nothing",
        "max_tokens 0",
        "a field of another schema",
    ],
)
def test_a_hostile_probe_record_is_refused_and_nothing_is_asked_or_written(
    tmp_path: Path, server: tuple[str, Answers], change: str
) -> None:
    url, double = server
    store, digest = recorded(tmp_path, url)
    record = json.loads(store.get_probe(digest) or b"")
    hostile(record, change)
    store.put_probe(digest, canonical_json(record), replace=True)
    double.asked.clear()
    done = probe(store, digest, url)
    assert done.returncode == 2, (change, done.stderr)
    assert f"the probe record of {digest}" in done.stderr and "Traceback" not in done.stderr
    assert double.asked == [] and store.receipt_names(digest) == []


def test_a_ref_moved_since_the_server_started_is_named(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, _ = server
    store, digest = recorded(tmp_path, url)
    root = tmp_path / "node"
    assert probe(store, digest, url).returncode == 0  # laid out for the server
    data = cpu_recipe(cpu_isa="host", model=str(model_folder(tmp_path)), max_num_seqs=8)
    moved = publish_build(store, data, tmp_path, "b")  # the next build, under the same ref
    done = neuronbuild(
        "probe", "--ref", "tiny", "--cache", store.url, "--url", url, "--vllm-cache-root", str(root)
    )
    assert done.returncode == 1
    assert f"{root} holds '{digest}', not {moved}: the server serves the build tiny named" in (
        done.stderr
    )


def test_push_carries_ci_s_answers_to_the_store_nodes_read(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    url, _ = server
    store, digest = recorded(tmp_path, url)  # CI's job folder
    shared = tmp_path / "shared"
    done = neuronbuild("push", "tiny/latest", "--from", store.url, "--cache", str(shared))
    assert done.returncode == 0, done.stderr
    assert Store(str(shared)).get_probe(digest) == store.get_probe(digest)


def test_a_receipt_says_whether_the_nodes_weights_are_the_builds(
    tmp_path: Path, server: tuple[str, Answers]
) -> None:
    from tests.runtime.test_serve_weights import sealed

    url, _ = server
    recipe, folder = sealed(tmp_path)
    store = Store(str(folder))
    digest = store.resolve("tiny/latest")
    workdir = ("--workdir", str(recipe.parent))
    assert probe(store, digest, url, "--record", *workdir, root=tmp_path / "ci").returncode == 0
    assert probe(store, digest, url, *workdir).returncode == 0
    weight = recipe.parent / "m" / "model-00002-of-00002.safetensors"
    weight.write_bytes(b"V")  # served under --allow-mismatch weights, say
    assert probe(store, digest, url, *workdir).returncode == 0
    told = [receipt(store, digest, name)[1]["predicate"] for name in store.receipt_names(digest)]
    assert sorted(t["weights"]["as_built"] for t in told) == [False, True]
    assert {t["weights"]["digest"] for t in told} != {None}
