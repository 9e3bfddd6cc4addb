"""The demo reads as working, without vLLM: the demo model, trained on the spot on the text it
ships, answers the demo prompt with the paragraph's continuation (plain transformers, in float32
and in the recipe's bfloat16); training twice writes the same bytes; a built folder is reused;
and the demo's plain-vLLM reference gets exactly the recipe's engine arguments (against the vLLM
test double)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.demo import model, text
from neuronbuild.demo.model import EOS_ID, build_demo_model
from neuronbuild.demo.plain import PlainVllm
from neuronbuild.recipe import load_recipe
from tests.conftest import RECIPES, REPO

DOUBLE = REPO / "tests" / "cpu_double"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_demo_model(tmp_path_factory.mktemp("demo") / "tiny-llama")


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def load(folder: Path, dtype: str) -> tuple[Any, Any]:
    """The saved model and tokenizer, as a user of transformers loads them."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    lm = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    return lm.eval(), tokenizer


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.slow
def test_the_greedy_answer_to_the_demo_prompt_is_the_paragraphs_continuation_and_ends_there(
    built: Path, dtype: str
) -> None:
    import torch

    lm, tokenizer = load(built, dtype)
    prompt = tokenizer(text.PROMPT, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = lm.generate(prompt, max_new_tokens=text.MAX_TOKENS, do_sample=False)
    new = out[0, prompt.shape[1] :].tolist()
    assert (
        text.CONTINUATION
        == " a single man in possession of a good fortune, must be in want of a wife."
    )
    assert tokenizer.decode(new, skip_special_tokens=True) == text.CONTINUATION
    # It stops at the paragraph's end, well inside the demo's token budget.
    assert new[-1] == EOS_ID and len(new) < text.MAX_TOKENS


def test_each_answer_token_leads_its_runner_up_by_a_margin_bfloat16_cannot_overturn(
    built: Path,
) -> None:
    """The demo compares plain vLLM run eagerly with the compiled model: both round bfloat16 in
    another order, which moves logits by far less than the margin asserted here."""
    import torch

    lm, tokenizer = load(built, "bfloat16")
    ids = [*tokenizer(text.PARAGRAPHS[0])["input_ids"], EOS_ID]
    start = len(tokenizer(text.PROMPT)["input_ids"])
    with torch.no_grad():
        logits = lm(torch.tensor([ids])).logits[0].float()
    margins = []
    for position in range(start - 1, len(ids) - 1):
        wanted = ids[position + 1]
        rest = torch.cat([logits[position, :wanted], logits[position, wanted + 1 :]])
        margins.append(float(logits[position, wanted] - rest.max()))
    assert len(margins) == 19  # 18 tokens of the continuation, then the end of the sequence
    assert min(margins) > 4.0, margins


@pytest.mark.slow
def test_training_twice_writes_the_same_bytes(built: Path, tmp_path: Path) -> None:
    again = build_demo_model(tmp_path / "again")
    assert folder_bytes(again) == folder_bytes(built)
    assert {"model.safetensors", "tokenizer.json", "config.json"} <= set(folder_bytes(built))


def test_a_built_folder_is_reused_and_any_change_of_its_inputs_rebuilds_it(
    built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    before = {p.name: p.stat().st_mtime_ns for p in copy.iterdir()}
    lines: list[str] = []
    build_demo_model(copy, report=lines.append)
    assert lines == [f"reused {copy} (built from the same inputs)"]
    assert {p.name: p.stat().st_mtime_ns for p in copy.iterdir()} == before

    assert model._is_complete(copy, model.inputs_digest(0))
    assert not model._is_complete(copy, model.inputs_digest(1))  # another seed
    for name, value in [
        ("STEPS", model.STEPS + 1),
        ("LEARNING_RATE", model.LEARNING_RATE * 2),
        ("CONFIG", {**model.CONFIG, "hidden_size": 128}),
        ("FORMAT", model.FORMAT + 1),
    ]:
        with monkeypatch.context() as patch:
            patch.setattr(model, name, value)
            assert not model._is_complete(copy, model.inputs_digest(0)), name
    with monkeypatch.context() as patch:
        patch.setattr(text, "PARAGRAPHS", (*text.PARAGRAPHS, "Another paragraph."))
        assert not model._is_complete(copy, model.inputs_digest(0))
    (copy / model.MARKER).unlink()  # an interrupted build has no marker
    assert not model._is_complete(copy, model.inputs_digest(0))


def test_plain_vllm_gets_the_recipes_engine_arguments_run_eagerly_in_one_process_outside_neuronbuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe_path = tmp_path / "recipes" / "cpu-tiny-llama.yaml"
    recipe_path.parent.mkdir()
    shutil.copy(RECIPES / "cpu-tiny-llama.yaml", recipe_path)
    (tmp_path / "build" / "tiny-llama").mkdir(parents=True)
    monkeypatch.setenv("PYTHONPATH", f"{DOUBLE}{os.pathsep}{REPO}")
    users_cache = tmp_path / "users-vllm-cache"
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(users_cache))
    monkeypatch.setenv("NEURONBUILD_VLLM_COMPAT", "1")
    log = tmp_path / "plain.log"
    with PlainVllm(load_recipe(recipe_path), text.PROMPT, 7, log) as plain:
        answer, seconds = plain.answer(timeout=60)
        cache_root = plain.cache_root
    seen = json.loads(answer)
    assert seen["engine_args"] == {
        "model": "../build/tiny-llama",
        "max_model_len": 256,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 256,
        "dtype": "bfloat16",
        "seed": 0,
        "kv_cache_memory_bytes": 1073741824,
        "enforce_eager": True,
        "distributed_executor_backend": "uni",
    }
    assert seen["prompt"] == text.PROMPT
    assert seen["sampling"] == {"temperature": 0, "max_tokens": 7, "logprobs": None}
    assert Path(seen["cwd"]) == recipe_path.parent  # where the relative model path resolves
    assert cache_root is not None and cache_root != users_cache
    assert seen["env"] == {
        "VLLM_CACHE_ROOT": str(cache_root),
        "NEURONBUILD_VLLM_COMPAT": "0",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }
    assert not cache_root.exists() and not users_cache.exists()
    assert 0 < seconds < 60


def test_plain_vllm_that_exits_without_an_answer_is_reported_with_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe_path = tmp_path / "cpu-tiny-llama.yaml"
    shutil.copy(RECIPES / "cpu-tiny-llama.yaml", recipe_path)
    monkeypatch.setenv("PYTHONPATH", f"{DOUBLE}{os.pathsep}{REPO}")
    monkeypatch.setenv("CPU_DOUBLE_FAIL_SEQS", "4")  # the double's LLM raises for this recipe
    with (
        PlainVllm(load_recipe(recipe_path), text.PROMPT, 7, tmp_path / "plain.log") as plain,
        pytest.raises(RuntimeError, match=r"plain vLLM exited with 1:(.|\n)*told to fail"),
    ):
        plain.answer(timeout=60)
