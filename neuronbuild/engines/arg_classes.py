"""Which vLLM engine arguments enter a unit key, and how a recipe's arguments are resolved.

Every ``EngineArgs`` field of the pinned vLLM (``data/vllm_engine_args.txt``) is classified here,
once, as *keyed* (it can change a compiled graph or vLLM's own cache key) or *serving-only* (it
changes how a server loads bytes, names itself, logs or listens, never what was compiled).
``tests/engines/test_classification.py`` fails when an argument of the data file is in neither
set, so a vLLM upgrade cannot slip an unreviewed argument into or out of the keys. When in doubt an
argument is keyed: a needless miss costs a compile, a wrong hit serves the wrong graphs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from neuronbuild.data.vllm_data import NO_DEFAULT
from neuronbuild.keys import canonical_json

SERVING_ONLY_ARGS = frozenset(
    {
        "served_model_name",
        "allowed_local_media_path",
        "allowed_media_domains",
        "download_dir",
        "safetensors_load_strategy",
        "safetensors_prefetch_num_threads",
        "safetensors_prefetch_block_size",
        "load_format",
        "master_addr",
        "master_port",
        "distributed_timeout_seconds",
        "cpu_distributed_timeout_seconds",
        "data_parallel_address",
        "data_parallel_rpc_port",
        "_api_process_count",
        "_api_process_rank",
        "max_parallel_loading_workers",
        "max_num_queued_reqs",
        "max_num_queued_tokens",
        "disable_log_stats",
        "aggregate_engine_logging",
        "hf_token",
        "media_io_kwargs",
        "mm_encoder_fp8_scale_save_path",
        "renderer_num_workers",
        "ray_workers_use_nsight",
        "ignore_patterns",
        "show_hidden_metrics_for_version",
        "otlp_traces_endpoint",
        "collect_detailed_traces",
        "per_request_spec_decode_metrics",
        "kv_cache_metrics",
        "kv_cache_metrics_sample",
        "custom_histogram_buckets",
        "cudagraph_metrics",
        "enable_layerwise_nvtx_tracing",
        "enable_mfu_metrics",
        "enable_logging_iteration_details",
        "jit_monitor_mode",
        "jit_monitor_verbose",
        "enable_mm_processor_stats",
        "profiler_config",
        "logging_config",
        "log_level",
        "log_config_file",
        "use_tqdm_on_load",
        "pt_load_map_location",
        "shutdown_timeout",
        "fail_on_environ_validation",
    }
)
"""Weight-loading options (how bytes are read: ``safetensors_*``, ``load_format``,
``download_dir``), host addresses, ports and timeouts, naming, logging, metrics and tracing:
``serve`` passes them through and keys ignore them (issue 9)."""

KEYED_ARGS = frozenset(
    {
        "enable_return_routed_experts",
        "return_sampling_mask",
        "model_weights",
        "tokenizer",
        "hf_config_path",
        "runner",
        "convert",
        "skip_tokenizer_init",
        "enable_prompt_embeds",
        "tokenizer_mode",
        "trust_remote_code",
        "config_format",
        "dtype",
        "kv_cache_dtype",
        "seed",
        "max_model_len",
        "cudagraph_capture_sizes",
        "max_cudagraph_capture_size",
        "ir_op_priority",
        "distributed_executor_backend",
        "pipeline_parallel_size",
        "nnodes",
        "node_rank",
        "numa_bind",
        "numa_bind_nodes",
        "numa_bind_cpus",
        "device_ids",
        "tensor_parallel_size",
        "prefill_context_parallel_size",
        "decode_context_parallel_size",
        "dcp_comm_backend",
        "dcp_q_replicate",
        "dcp_kv_cache_interleave_size",
        "cp_kv_cache_interleave_size",
        "data_parallel_size",
        "data_parallel_rank",
        "data_parallel_start_rank",
        "data_parallel_size_local",
        "data_parallel_hybrid_lb",
        "data_parallel_external_lb",
        "data_parallel_multi_port_external_lb",
        "data_parallel_backend",
        "enable_hc_sp",
        "enable_expert_parallel",
        "enable_batch_sharded_sampling",
        "enable_ep_weight_filter",
        "moe_backend",
        "linear_backend",
        "sparse_indexer_topk_backend",
        "all2all_backend",
        "enable_elastic_ep",
        "elastic_ep_max_dp_size",
        "enable_dbo",
        "ubatch_size",
        "dbo_decode_token_threshold",
        "dp_sync_interval",
        "dbo_prefill_token_threshold",
        "disable_nccl_for_dp_synchronization",
        "eplb_config",
        "enable_eplb",
        "expert_placement_strategy",
        "block_size",
        "enable_prefix_caching",
        "prefix_caching_hash_algo",
        "prefix_cache_retention_interval",
        "disable_sliding_window",
        "disable_cascade_attn",
        "offload_backend",
        "cpu_offload_gb",
        "cpu_offload_params",
        "offload_group_size",
        "offload_num_in_group",
        "offload_prefetch_step",
        "offload_params",
        "gpu_memory_utilization",
        "kv_cache_memory_bytes",
        "max_num_batched_tokens",
        "max_num_scheduled_tokens",
        "long_prefill_token_threshold",
        "long_prefill_token_threshold_adaptive",
        "max_num_seqs",
        "max_num_active_seqs",
        "max_logprobs",
        "logprobs_mode",
        "use_fp64_gumbel",
        "enable_trace_replay",
        "code_revision",
        "hf_overrides",
        "model_class_overrides",
        "tokenizer_revision",
        "quantization",
        "quantization_config",
        "allow_deprecated_quantization",
        "enforce_eager",
        "disable_custom_all_reduce",
        "enable_shm_tensor_arena",
        "language_model_only",
        "limit_mm_per_prompt",
        "enable_mm_embeds",
        "interleave_mm_strings",
        "mm_processor_kwargs",
        "mm_processor_cache_gb",
        "mm_processor_cache_type",
        "mm_hasher_algorithm",
        "mm_shm_cache_max_object_size_mb",
        "mm_encoder_only",
        "mm_encoder_tp_mode",
        "mm_encoder_attn_backend",
        "mm_encoder_attn_dtype",
        "mm_encoder_fp8_scale_path",
        "mm_encoder_fp8_scale_save_margin",
        "io_processor_plugin",
        "skip_mm_profiling",
        "video_pruning_rate",
        "video_pruning_method",
        "mm_tensor_ipc",
        "mm_processor_device",
        "mm_ipc_gpu_memory_gb",
        "mm_device_do_normalize",
        "enable_lora",
        "max_loras",
        "max_lora_rank",
        "default_mm_loras",
        "fully_sharded_loras",
        "max_cpu_loras",
        "lora_dtype",
        "lora_target_modules",
        "enable_tower_connector_lora",
        "specialize_active_lora",
        "enable_mixed_moe_lora_format",
        "enable_moe_shared_loras",
        "max_lora_cls_labels",
        "num_gpu_blocks_override",
        "model_loader_extra_config",
        "enable_chunked_prefill",
        "disable_chunked_mm_input",
        "scheduler_reserve_full_isl",
        "prefill_schedule_interval",
        "watermark",
        "disable_hybrid_kv_cache_manager",
        "structured_outputs_config",
        "aux_output_config",
        "reasoning_parser",
        "reasoning_parser_plugin",
        "speculative_config",
        "spec_method",
        "spec_model",
        "spec_tokens",
        "watermark_config",
        "diffusion_config",
        "scheduling_policy",
        "scheduler_cls",
        "pooler_config",
        "compilation_config",
        "attention_config",
        "engram_config",
        "mamba_config",
        "kernel_config",
        "enable_flashinfer_autotune",
        "worker_cls",
        "worker_extension_cls",
        "kv_transfer_config",
        "kv_events_config",
        "ec_transfer_config",
        "ec_manager_config",
        "reasoning_config",
        "generation_config",
        "enable_sleep_mode",
        "sleep_mode_offload_cudagraph",
        "sleep_preserve_parameter_names",
        "enable_cumem_allocator",
        "enable_nccl_comm_suspend",
        "override_generation_config",
        "model_impl",
        "attention_backend",
        "kv_cache_dtype_skip_layers",
        "mamba_cache_dtype",
        "mamba_ssm_cache_dtype",
        "mamba_block_size",
        "prefix_match_unit",
        "mamba_cache_mode",
        "enable_mamba_shared_prefix_checkpoint",
        "replayssm_buffer_len",
        "use_replayssm",
        "mamba_backend",
        "mamba_ssu_algorithm",
        "enable_mamba_cache_stochastic_rounding",
        "mamba_cache_philox_rounds",
        "additional_config",
        "logits_processors",
        "async_scheduling",
        "stream_interval",
        "kv_sharing_fast_prefill",
        "swa_bounded_replay",
        "optimization_level",
        "performance_mode",
        "fault_tolerance_config",
        "enable_fault_tolerance",
        "kv_offloading_size",
        "kv_offloading_backend",
        "tokens_only",
        "weight_transfer_config",
        "gdn_prefill_backend",
        "kda_prefill_backend",
        "kda_decode_backend",
    }
)
"""Everything else vLLM's ``EngineArgs`` holds: shapes, parallelism, dtypes, kernels, cache and
scheduler sizes, compilation and model configuration. ``model`` and ``revision`` are keyed as
factors of their own."""

OWN_FACTORS = frozenset({"model", "revision"})
"""Engine arguments that enter a key as factors of their own, not under ``engine_args``."""


PRUNED_CONFIGS: dict[str, frozenset[str]] = {
    "additional_config": frozenset(
        {"neuron_config", "vision_neuron_config", "encoder_neuron_config"}
    )
}
"""Arguments whose keys set to ``None`` or ``{}`` are read as absent, with their sub-configs that
are too: vLLM-Neuron reads ``additional_config``, ``neuron_config`` and the encoder's settings
(``vision_neuron_config``, ``encoder_neuron_config`` from 0.29) with ``.get(key)`` defaults.
Elsewhere a null is a value: vLLM applies ``hf_overrides`` with
``config.update(hf_overrides_kw)``, so ``{sliding_window: null}`` changes the model config."""


def _verbatim(value: Any) -> Any:
    """``value`` with mapping keys as sorted strings, nothing left out."""
    if isinstance(value, Mapping):
        return {str(k): _verbatim(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_verbatim(v) for v in value]
    return value


def _pruned(value: Mapping[Any, Any], subs: frozenset[str]) -> dict[str, Any]:
    out = {
        str(k): _pruned(v, frozenset())
        if str(k) in subs and isinstance(v, Mapping)
        else _verbatim(v)
        for k, v in value.items()
    }
    return {k: v for k, v in sorted(out.items()) if v is not None and v != {}}


def normalise_arg(name: str, value: Any) -> Any:
    """One spelling per value of engine argument ``name``: keys sorted; in the mappings of
    :data:`PRUNED_CONFIGS` (only), a key set to ``None`` or ``{}`` left out, as absent."""
    if name in PRUNED_CONFIGS and isinstance(value, Mapping):
        return _pruned(value, PRUNED_CONFIGS[name])
    return _verbatim(value)


def normalise(args: Mapping[str, Any]) -> dict[str, Any]:
    """Engine arguments in one spelling: an argument set to ``None`` or ``{}`` is left out (vLLM
    reads it as absent), each value by :func:`normalise_arg`."""
    out = {str(k): normalise_arg(str(k), v) for k, v in args.items()}
    return {k: v for k, v in sorted(out.items()) if v is not None and v != {}}


def resolve_engine_args(
    args: Mapping[str, Any], defaults: Mapping[str, Any], serving_only: frozenset[str]
) -> dict[str, Any]:
    r"""The keyed arguments of ``args`` as their difference from the resolved defaults.

    ``defaults`` maps an argument to the value the engine applies when it is absent (vLLM's
    defaults for the pinned version, overlaid with the engine's own); arguments in
    ``serving_only`` and :data:`OWN_FACTORS` are left out (an unclassified one counts as keyed).
    An argument that is ``None``, or whose value (by :func:`normalise_arg`) has the canonical JSON
    of its default (an integer for a float default counts as that float), is left out too: the
    resolved configurations of two recipes are equal exactly when these mappings are, so adding
    an argument at its default never changes a key.
    """
    out: dict[str, Any] = {}
    for name, raw in args.items():
        if name in OWN_FACTORS or name in serving_only:
            continue
        value = normalise_arg(name, raw)
        default = defaults.get(name, NO_DEFAULT)
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if value is None or (value == {} and default in (NO_DEFAULT, None, {})):
            continue
        if default is not NO_DEFAULT and canonical_json(value) == canonical_json(default):
            continue
        out[name] = value
    return dict(sorted(out.items()))
