"""The key classification tables, pinned entry by entry (issue 46 item 18): which vLLM engine
arguments are keyed and which serving-only (``neuronbuild/engines/arg_classes.py``), which
variables hold a path (``neuronbuild/engines/env_classes.py``: a path never enters a key), and
which files of a model folder a compile reads (``neuronbuild/model_files.py``: each enters the
``model_files`` factor). ``tests/engines/test_classification.py`` holds every argument in exactly
one class; these state the class of the entries a wrong move would hurt, each with its reason, so
that moving one entry to the other class fails here by name (``tests/claim_breaks.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronbuild.engines.env_classes import EnvClass, is_path_valued
from neuronbuild.engines.registry import get_engine
from neuronbuild.keys import FactorDifference, factor_source
from neuronbuild.model_files import content_digest

ENGINES = ("cpu", "neuron")

KEYED = {
    "max_model_len": "sizes every graph (the longest sequence compiled for)",
    "max_num_seqs": "sizes the batch dimension of the decode graphs",
    "max_num_batched_tokens": "sizes the prefill graphs",
    "dtype": "the weights' and activations' type in every graph",
    "kv_cache_dtype": "the KV cache's type in the attention graphs",
    "quantization": "another kernel for every linear layer",
    "tensor_parallel_size": "shards every graph over that many cores",
    "block_size": "the KV cache's block shape in the attention graphs",
    "enforce_eager": "whether vLLM compiles graphs at all",
    "compilation_config": "vLLM's own compile settings (its cache key hashes them)",
    "hf_overrides": "changes the model config the graphs are traced from",
    "seed": "vLLM hashes it into its own compile key",
    "gpu_memory_utilization": "sizes the KV cache the graphs are compiled against",
    "tokenizer": "another tokenizer (vocabulary) changes the model's inputs",
    "trust_remote_code": "loads the model's own code, which may trace other graphs",
}
"""Keyed arguments, each with why: serving one of them changed would run graphs compiled for
another value (a wrong hit), so each must be in every unit key."""

SERVING_ONLY = {
    "served_model_name": "the name the server answers to, never what was compiled",
    "load_format": "how weight bytes are read, not which graphs run on them",
    "safetensors_load_strategy": "how weight bytes are read",
    "download_dir": "a path on the node: a key never holds a host path",
    "hf_token": "a secret: it must never be written into a key or a manifest",
    "master_port": "a port of this host",
    "disable_log_stats": "logging",
}
"""Serving-only arguments, each with why: keying one would make a node miss (and compile) over a
setting that changes nothing compiled, or write a host's path or secret into the store."""


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(KEYED))
def test_each_argument_that_shapes_a_graph_is_keyed(engine: str, name: str) -> None:
    classes = get_engine(engine)
    assert name in classes.keyed_args, f"{name} must be keyed: {KEYED[name]}"
    assert name not in classes.serving_only_args


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("name", sorted(SERVING_ONLY))
def test_each_argument_that_only_serves_is_serving_only(engine: str, name: str) -> None:
    classes = get_engine(engine)
    assert name in classes.serving_only_args, f"{name} is serving-only: {SERVING_ONLY[name]}"
    assert name not in classes.keyed_args


PATHS = {
    "TORCHINDUCTOR_CACHE_DIR": "_DIR",
    "VLLM_NCCL_SO_PATH": "_PATH",
    "CUDA_HOME": "_HOME",
    "VLLM_CACHE_ROOT": "_ROOT",
    "VLLM_NEURON_GRAPH_FILE": "_FILE",
    "VLLM_TUNED_CONFIG_FOLDER": "_FOLDER",
}
"""One path-valued name per ending :func:`is_path_valued` knows (a made-up ``VLLM_NEURON_*``
name where vLLM reads none with that ending)."""


@pytest.mark.parametrize("name", sorted(PATHS))
def test_a_name_ending_as_a_path_does_holds_a_path(name: str) -> None:
    assert is_path_valued(name), f"{name} ends with {PATHS[name]}: it names where, not what"


@pytest.mark.parametrize(
    "name", ["NEURON_CC_FLAGS", "VLLM_PP_LAYER_PARTITION", "TORCHINDUCTOR_FREEZING", "PATH"]
)
def test_a_setting_is_no_path(name: str) -> None:
    assert not is_path_valued(name)


@pytest.mark.parametrize(
    ("engine", "name", "expected"),
    [
        # vLLM hashes it into its own key, but a path cannot be keyed: kept from the engine.
        ("cpu", "CUDA_HOME", EnvClass.DROPPED),
        ("cpu", "VLLM_NCCL_SO_PATH", EnvClass.DROPPED),
        # A name under a keyed prefix that holds a path: never keyed.
        ("cpu", "TORCHINDUCTOR_DUMP_ROOT", EnvClass.NODE_LOCAL),
        ("cpu", "TORCHINDUCTOR_TRACE_FILE", EnvClass.NODE_LOCAL),
        ("cpu", "TORCHINDUCTOR_CACHE_FOLDER", EnvClass.NODE_LOCAL),
        ("cpu", "TORCHINDUCTOR_TOOLS_HOME", EnvClass.NODE_LOCAL),
        ("neuron", "VLLM_NEURON_GRAPH_FILE", EnvClass.DROPPED),
        ("neuron", "NEURON_LIBTORCH_DUMP_ROOT", EnvClass.DROPPED),
        ("neuron", "VLLM_NEURON_KERNELS_HOME", EnvClass.DROPPED),
        ("neuron", "VLLM_NEURON_PLUGINS_FOLDER", EnvClass.DROPPED),
        # ... and the same prefix without a path ending is keyed.
        ("neuron", "VLLM_NEURON_GRAPH_MODE", EnvClass.KEYED),
        ("cpu", "TORCHINDUCTOR_MAX_AUTOTUNE", EnvClass.KEYED),
    ],
)
def test_a_path_valued_variable_never_enters_a_key(
    engine: str, name: str, expected: EnvClass
) -> None:
    assert get_engine(engine).classify_env(name) is expected


READS = {
    "config.json": "the architecture every graph is traced from",
    "generation_config.json": "generation defaults vLLM compiles with",
    "tokenizer.json": "the vocabulary (the embedding's size)",
    "tokenizer_config.json": "the tokenizer's settings and special tokens",
    "special_tokens_map.json": "the special tokens",
    "added_tokens.json": "tokens added to the vocabulary",
    "tokenizer.model": "a sentencepiece vocabulary",
    "vocab.json": "a BPE vocabulary",
    "vocab.txt": "a WordPiece vocabulary",
    "merges.txt": "BPE merges",
    "chat_template.jinja": "the chat template",
    "chat_template.json": "the chat template",
    "preprocessor_config.json": "a multimodal model's input shapes",
    "processor_config.json": "a multimodal model's processor",
    "model.safetensors.index.json": "names every tensor and its file",
    "pytorch_model.bin.index.json": "names every tensor and its file",
}
"""Each file of a model folder a compile reads, with what it decides."""


@pytest.mark.parametrize("name", sorted(READS))
def test_each_file_a_compile_reads_enters_the_model_files_factor(tmp_path: Path, name: str) -> None:
    """Swapping the file under the same folder path changes the factor (so every key)."""
    (tmp_path / name).write_text("one")
    before = content_digest(tmp_path)
    (tmp_path / name).write_text("two")
    assert name in before and content_digest(tmp_path) != before, READS[name]


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_without_an_index_each_weight_file_enters_by_its_size(tmp_path: Path, weights: str) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / weights).write_bytes(b"0" * 8)
    assert content_digest(tmp_path)[weights] == "size:8"
    (tmp_path / weights).write_bytes(b"0" * 9)
    assert content_digest(tmp_path)[weights] == "size:9"


@pytest.mark.parametrize(
    ("factor", "source"),
    [
        ("env.NEURON_CC_FLAGS", "environment"),  # the environment the command started with
        ("installed.vllm-neuron", "this host"),  # the distributions installed here
        ("model_files.config.json", "model folder"),  # the local folder's files
        ("schema", "neuronbuild"),  # neuronbuild's own key schema, not the user's doing
        ("engine_args.max_model_len", "recipe"),
        ("toolchain.torch", "recipe"),
    ],
)
def test_doctor_and_serve_label_each_factor_with_where_its_value_came_from(
    factor: str, source: str
) -> None:
    """A difference serve or doctor names says where this side's value came from, so the user
    knows what to change (the environment, the host's installs, the model folder, neuronbuild)."""
    assert factor_source(factor) == source
    assert str(FactorDifference(factor, 1, 2)) == f"{factor}: {source} 1, manifest 2"


def test_with_an_index_the_weight_files_stay_out_of_the_factor(tmp_path: Path) -> None:
    """The index names every tensor and its file, so it stands for the weights: their sizes do
    not enter the factor beside it."""
    (tmp_path / "model.safetensors.index.json").write_text("{}")
    (tmp_path / "model-00001-of-00001.safetensors").write_bytes(b"0" * 8)
    assert list(content_digest(tmp_path)) == ["model.safetensors.index.json"]
