"""The ``neuron`` engine's classification of the Neuron and vLLM-Neuron environment variables.

Sources: reference/vllm-neuron-contract.md (Neuron SDK 2.32.0 docs, vLLM-Neuron's ``envs.py`` in
public forks). vLLM-Neuron hashes no variable directly; a variable matters when it changes a
graph, its inputs or the compiler's arguments (contract, section 3), which makes it keyed. vLLM's
own variables are classified as for every engine (:func:`~.env_classes.classify_vllm_env`).
"""

from __future__ import annotations

from neuronbuild.engines.env_classes import EnvClass

KEYED, LOCAL, DROPPED, REFUSED = (
    EnvClass.KEYED,
    EnvClass.NODE_LOCAL,
    EnvClass.DROPPED,
    EnvClass.REFUSED_AT_SERVE,
)

NEURON_ENV: dict[str, EnvClass] = {
    # Compiler flags enter neuronx-cc's arguments, which are in every NEFF key.
    "NEURON_CC_FLAGS": KEYED,
    # Logical NeuronCore config: changes the compiler's --lnc, hence every NEFF.
    "NEURON_LOGICAL_NC_CONFIG": KEYED,
    # Cap on the KV budget: sets KV num_blocks, a graph input shape (contract 2, step 4).
    "VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION": KEYED,
    "VLLM_NEURON_MIN_KV_BUDGET_GIB": KEYED,
    # Choose the compile route and the kernels inside each graph.
    "VLLM_NEURON_BACKEND": KEYED,
    "VLLM_NEURON_DISABLE_NKI_KERNELS": KEYED,
    "TORCH_CACHING_PRECOMPILE": KEYED,
    # How fast, how loud and where a process runs: never what it compiles.
    "NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS": LOCAL,
    "VLLM_NEURON_PARALLEL_COMPILE_WORKERS": LOCAL,
    "VLLM_NEURON_PARALLEL_TRACE_WORKERS": LOCAL,
    "VLLM_NEURON_DISABLE_PARALLEL_TRACE": LOCAL,
    "NEURON_LIBTORCH_COMPILATION_TIMEOUT": LOCAL,
    "VLLM_NEURON_COMPILATION_TIMEOUT": LOCAL,
    "VLLM_NEURON_LOG_LEVEL": LOCAL,
    "NEURON_RT_LOG_LEVEL": LOCAL,
    "NEURON_RT_VISIBLE_CORES": LOCAL,
    "VLLM_NEURON_ASSERT_CACHE_HIT": LOCAL,
    # Set by neuronbuild's serve ("never compile"); the engine's value replaces the user's.
    "VLLM_NEURON_DISABLE_WARMUP_COMPILE": LOCAL,
    "NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND": LOCAL,
    # Other caches and phase switches: the compile chooses its own phases and store.
    "NEURON_LIBTORCH_REMOTE_CACHE": DROPPED,
    "VLLM_NEURON_REMOTE_CACHE": DROPPED,
    "NEURON_COMPILED_ARTIFACTS": DROPPED,
    "NEURON_COMPILE_CACHE_URL": DROPPED,
    "VLLM_NEURON_SKIP_PREFILL_WARMUP": DROPPED,
    "VLLM_NEURON_SKIP_DECODE_WARMUP": DROPPED,
    "VLLM_NEURON_SKIP_PREFILL_DECODE_WARMUP": DROPPED,
    "VLLM_NEURON_SKIP_ENCODER_WARMUP": DROPPED,
    # Other tools' switches a compile host may have set (internals, prior art): optimum-neuron's
    # hub cache bucket, and torch-neuronx's graph-extraction-only run for neuron_parallel_compile.
    "NEURON_CACHE_BUCKET": DROPPED,
    "NEURON_PARALLEL_COMPILE": DROPPED,
    # On a node these would build on the spot or mis-target: the compile host sets them itself.
    "NEURON_PLATFORM_TARGET_OVERRIDE": REFUSED,
    "VLLM_NEURON_CPU_COMPILE": REFUSED,
    "VLLM_NEURON_CPU_MODE": REFUSED,
    "NEURON_LIBTORCH_DISABLE_COMPILE_CACHE": REFUSED,
    "NEURON_RT_ALLOW_LEGACY_NEFF": REFUSED,
}
"""Every Neuron variable the contract names, with its class for the ``neuron`` engine."""
