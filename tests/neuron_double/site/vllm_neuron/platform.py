"""Test double of vLLM-Neuron's platform, worker and compile cache (contract sections 2-6).

Written from the plugin's code, never from neuronbuild's: ``vllm_neuron/vllm/platform.py``
(``apply_config_platform_defaults``, ``_resolve_vision_auto_config``, jinhuang12/vllm-neuron
@25cf3c8c), ``vllm_neuron/model/neuron_config.py`` (``VisionNeuronConfig.resolve_tp_dp``,
@289de16c), ``vllm_neuron/utils/vision_utils.py`` and ``bucket_utils.py`` (@10c6804d), and the
worker's skip logic in ``vllm_neuron/vllm/worker/neuron_worker.py`` ``compile_or_warm_up_model``
(@03bd80a2; AWShtokoyo/vllm-neuron @01c89e38 carries the same code).

Resolves the configuration, plans the graphs of the engine arguments with its own code, compiles each one that the local
cache lacks into ``$VLLM_CACHE_ROOT/neuron/compile_cache/<key>/`` (or fails like neuronx-cc when
told to), and at serve with ``VLLM_NEURON_DISABLE_WARMUP_COMPILE=1`` loads every graph from the
local cache or fails on the first miss.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vllm_neuron.buckets import resolve_buckets

GENERATION_2 = (0, 29)
"""vllm-neuron 0.29 (Neuron 2.33.0, 2026-10-19) and later: the second generation."""

GA_AFTER = (0, 29, 0, 1, 2, 0)
"""The last Beta plugin (Neuron 2.33.x); a later one is the GA of Neuron 2.34.0, which serves
multi-LoRA (GitHub release v2.34.0, 2026-11-30). The GA's version is on no page we could read, so
the double's 2.34 installation reports a stand-in newer than this one."""

NATIVE_VALUES = ("neuron_native", "neuron")
"""``VLLM_NEURON_BACKEND`` values that select the native route ("export
VLLM_NEURON_BACKEND=neuron_native"; "Some container images set VLLM_NEURON_BACKEND=neuron. This
value also selects the native route": how-to-choose-compilation-route.md, v2.33.0 docs,
2026-10-08)."""

HBM_GIB = {"trn1": 32, "inf2": 32, "trn2": 96, "trn3": 144}
"""Static HBM per target that sizes the KV cache in CPU compile (determine_available_memory)."""


def flag(name: str) -> bool:
    return os.environ.get(name, "0") not in ("", "0")


def plugin_version() -> tuple[int, ...]:
    """This installation's vllm-neuron version as numbers (its local label dropped)."""
    public = importlib.metadata.version("vllm-neuron").split("+")[0]
    return tuple(int(part) for part in public.split("."))


def encoder_namespace() -> str:
    """Where the encoder settings live in ``additional_config``: ``vision_neuron_config`` up to
    0.24 (reference-configuration.md, 2026-08-13), ``encoder_neuron_config`` from 0.29 ("multimodal
    encoder settings", reference-configuration.md of v2.33.0, 2026-10-16)."""
    return "encoder_neuron_config" if plugin_version() >= GENERATION_2 else "vision_neuron_config"


def route() -> str | None:
    """0.29's compile route: native when ``VLLM_NEURON_BACKEND`` is unset ("When
    VLLM_NEURON_BACKEND is not set, the server uses the native route") or one of
    :data:`NATIVE_VALUES`; any other value is kept as given (the XLA route's value is on no page we
    could read). None before 0.29, whose value enters the graph as set (:func:`graph_env`)."""
    if plugin_version() < GENERATION_2:
        return None
    value = os.environ.get("VLLM_NEURON_BACKEND", "").strip()
    return "native" if value in ("", *NATIVE_VALUES) else value


def precompile_cache_on(serving: bool) -> bool:
    """Whether this start saves and reuses its trace in the Precompile Cache: 0.29 or later, a
    device start (never CPU mode: "The cache does not apply in CPU mode"), ``VLLM_NEURON_BACKEND``
    set to a native value ("When the variable is not set, the server uses the native route, but
    the cache is off") and ``TORCH_CACHING_PRECOMPILE`` not ``0`` (how-to-precompile-cache.md,
    2026-10-13)."""
    return (
        plugin_version() >= GENERATION_2
        and serving
        and not flag("VLLM_NEURON_CPU_COMPILE")
        and os.environ.get("VLLM_NEURON_BACKEND", "").strip() in NATIVE_VALUES
        and os.environ.get("TORCH_CACHING_PRECOMPILE", "1").strip() != "0"
    )


def lora_inputs(args: dict[str, Any]) -> list[int] | None:
    """The adapter slot inputs ``--enable-lora`` adds to every graph: A weights ``[max_loras + 1,
    in, max_lora_rank]`` (slot 0 zeros for the base model: multi-LoRA design page, 2026-11-18),
    as ``[slots, rank]`` (unset sizes: vLLM's ``EngineArgs`` defaults, ``max_loras`` 1 and
    ``max_lora_rank`` 16, ``vllm/engine/arg_utils.py``); None without LoRA. Before the GA the runner loads the base model without
    LoRA ("TODO: Inherit from LoRAModelRunnerMixin", vllm-project/vllm-neuron
    neuron_model_runner.py @9fc042ea): refused at start."""
    if not args.get("enable_lora"):
        return None
    if plugin_version() <= GA_AFTER:
        raise ValueError("LoRA is not supported by vLLM Neuron before its GA release (Neuron 2.34)")
    return [int(args.get("max_loras") or 1) + 1, int(args.get("max_lora_rank") or 16)]


def model_config(model: str) -> dict[str, Any]:
    """The model's ``config.json`` as vLLM finds it: a folder (from the working directory), else
    the Hugging Face cache snapshot (vLLM runs offline); ``{}`` when neither has one."""
    folder = Path(model).expanduser()
    path: Path | None = folder / "config.json" if folder.is_dir() else None
    if path is None:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "config.json")
        path = Path(found) if isinstance(found, str) else None
    if path is None or not path.is_file():
        return {}
    config = json.loads(path.read_text())
    return config if isinstance(config, dict) else {}


def next_pow2(n: int) -> int:
    """``bucket_utils.next_power_of_2``."""
    power = 1
    while power < n:
        power *= 2
    return power


def merge_factor(config: dict[str, Any]) -> int:
    """``vision_utils.get_vision_token_merge_factor``: the model class's own rule, else 1 (the
    Qwen3-VL / Qwen3.5 classes: ``spatial_merge_size ** 2``; InternVL: ``1 / downsample_ratio**2``)."""
    arch = (config.get("architectures") or [""])[0]
    if arch.startswith(("Qwen3VL", "Qwen3_5")) and arch.endswith("ForConditionalGeneration"):
        return int(config["vision_config"].get("spatial_merge_size", 1)) ** 2
    if arch == "InternVLChatModel":
        return round(1 / config.get("downsample_ratio", 0.5) ** 2)
    return 1


def max_pixels_tokens(config: dict[str, Any], max_pixels: int) -> int | None:
    """``vision_utils.get_max_pixels_token_count``: ``max_pixels // patch_size ** 2`` for the
    classes with a max_pixels rule (Qwen3-VL, Qwen3.5), None for the others."""
    arch = (config.get("architectures") or [""])[0]
    if arch.startswith(("Qwen3VL", "Qwen3_5")) and arch.endswith("ForConditionalGeneration"):
        return max_pixels // int(config["vision_config"]["patch_size"]) ** 2
    return None


def auto_vision_config(args: dict[str, Any], config: dict[str, Any]) -> None:
    """``NeuronPlatform._resolve_vision_auto_config``, run for a model whose config has a
    ``vision_config``: creates ``vision_neuron_config`` when absent, raises the attention block
    for ``max_pixels``, checks an explicit bucket list, else fills in the default buckets."""
    additional = args.setdefault("additional_config", {})
    vnc = additional.setdefault(encoder_namespace(), {})
    block = vnc.get("vision_attention_block_size", 2048)
    max_pixels = (args.get("mm_processor_kwargs") or {}).get("max_pixels")
    if max_pixels:
        tokens = max_pixels_tokens(config, max_pixels)
        if tokens is not None and tokens > block:
            block = vnc["vision_attention_block_size"] = next_pow2(tokens)
    if vnc.get("num_vision_tokens_buckets"):
        if vnc.get("max_vision_seq_len"):
            raise ValueError(
                "Cannot set both num_vision_tokens_buckets and max_vision_seq_len in "
                "vision_neuron_config."
            )
        if max(vnc["num_vision_tokens_buckets"]) < block:
            raise ValueError(
                f"Largest bucket ({max(vnc['num_vision_tokens_buckets'])}) is smaller than "
                f"vision_attention_block_size ({block})."
            )
        return
    top = next_pow2(int(args["max_model_len"]) * merge_factor(config))
    cap = vnc.get("max_vision_seq_len") or block
    if cap < block:
        raise ValueError(f"max_vision_seq_len ({cap}) must be >= vision_attention_block_size")
    top = min(top, cap)
    buckets, bucket = [], block
    while bucket < top:
        buckets.append(bucket)
        bucket *= 2
    vnc["num_vision_tokens_buckets"] = [*buckets, top]


def vision_tp_dp(vnc: dict[str, Any], world: int) -> tuple[int, int]:
    """``VisionNeuronConfig.resolve_tp_dp``: the size left at 1 is inferred from the world."""
    tp, dp = vnc.get("tp_size", 1), vnc.get("dp_size", 1)
    if tp == 1 and dp == 1:
        return 1, world
    if dp == 1 or tp == 1:
        if world % (tp * dp):
            raise ValueError(f"world_size ({world}) must be divisible by vision tp/dp size")
        return (tp, world // tp) if dp == 1 else (world // dp, dp)
    if tp * dp != world:
        raise ValueError(f"vision tp_size ({tp}) * dp_size ({dp}) must equal world_size ({world})")
    return tp, dp


POOLING_SUFFIXES = [
    *[(s, False) for s in ("ForCausalLM", "ForConditionalGeneration", "ChatModel", "LMHeadModel")],
    *[(s, True) for s in ("ForTextEncoding", "EmbeddingModel", "ForSequenceClassification")],
    *[(s, True) for s in ("ForTokenClassification", "ClassificationModel", "RewardModel")],
    *[(s, True) for s in ("ForRewardModeling", "Model")],
]
"""vLLM's architecture suffix defaults (``vllm/config/model.py``), first match wins."""


def is_pooling(args: dict[str, Any], config: dict[str, Any]) -> bool:
    """vLLM's ``runner_type == "pooling"``: ``--runner pooling``, a pooling ``--convert``, or
    ``--runner auto`` with a pooling architecture."""
    if args.get("runner") == "pooling" or args.get("convert") in ("embed", "classify", "reward"):
        return True
    if args.get("runner", "auto") != "auto":
        return False
    arch = (config.get("architectures") or [""])[0]
    return next((pool for suffix, pool in POOLING_SUFFIXES if arch.endswith(suffix)), False)


SERVER_MNBT = ((70, 8192), (0, 2048))
"""vLLM's API server's ``max_num_batched_tokens`` when it is left out, by device memory (GiB, at
least): 8192 on a device of 70 GiB or more, else 2048 (``EngineArgs`` usage-context defaults,
``vllm/engine/arg_utils.py``; fidelity row D23, source V); the platform leaves it alone."""


def resolve_config(args: dict[str, Any], device_gib: int) -> dict[str, Any]:
    """The engine arguments as the API server and the platform leave them
    (``check_and_update_config``): ``max_num_batched_tokens`` defaulted by the server for a device
    of ``device_gib`` (:data:`SERVER_MNBT`), the O-level of ``apply_config_platform_defaults``
    (vLLM's default O2 becomes O1 unless ``--optimization-level`` is in ``sys.argv``: the offline
    ``LLM()`` never has it) and the vision config every model with a ``vision_config`` gets."""
    args = json.loads(json.dumps(args))
    if args.get("max_num_batched_tokens") is None:
        args["max_num_batched_tokens"] = next(n for gib, n in SERVER_MNBT if device_gib >= gib)
    level = int(args.get("optimization_level", 2))
    explicit = any(a.startswith("--optimization-level") for a in sys.argv)
    args["optimization_level"] = 1 if level == 2 and not explicit else level
    config = model_config(str(args["model"]))
    validate_dcp(args, config)
    if "vision_config" in config:
        auto_vision_config(args, config)
    args["_pooling"] = is_pooling(args, config)
    args["_buckets"] = resolve_buckets(args)
    args["_lora"] = lora_inputs(args)
    return args


def validate_dcp(args: dict[str, Any], config: dict[str, Any]) -> None:
    """``NeuronPlatform._validate_dcp_config`` (jinhuang12/vllm-neuron @25cf3c8c
    ``vllm_neuron/vllm/platform.py``): with ``decode_context_parallel_size`` above 1, the long
    prefill threshold on the DCP stride, the Nixl connector, ``tp >= dcp * kv_heads``, the GQA
    ratio divisible by dcp and ``tp % dcp == 0``. The heads as vLLM has them: from transformers'
    config class of the config's ``model_type`` (``AutoConfig``, its defaults filling what the
    file leaves out), ``num_key_value_heads`` else the attention heads of its text config
    (``get_total_num_kv_heads`` for a plain model); a config without ``model_type``, which
    ``AutoConfig`` cannot load, skips the head checks."""
    dcp = int(args.get("decode_context_parallel_size", 1))
    if dcp <= 1:
        return
    tp = int(args.get("tensor_parallel_size", 1))
    q_heads = kv_heads = 0
    if "model_type" in config:
        from transformers import AutoConfig

        fields = {k: v for k, v in config.items() if k != "model_type"}
        text = AutoConfig.for_model(config["model_type"], **fields).get_text_config()
        q_heads = int(text.num_attention_heads)
        kv_heads = int(getattr(text, "num_key_value_heads", None) or q_heads)
    stride = dcp * int(args.get("block_size") or 32)
    threshold = int(args.get("long_prefill_token_threshold") or 0)
    if threshold > 0 and threshold % stride != 0:
        raise ValueError(f"DCP requires long_prefill_token_threshold divisible by {stride}")
    kv = args.get("kv_transfer_config")
    if kv is not None and kv.get("kv_connector") != "NeuronNixlConnector":
        raise ValueError("DCP requires kv_connector='NeuronNixlConnector'")
    if q_heads and tp < dcp * kv_heads:
        raise ValueError(f"DCP requires tensor_parallel_size >= {dcp * kv_heads}")
    if q_heads and (q_heads // kv_heads) % dcp != 0:
        raise ValueError("DCP requires (num_q_heads // num_kv_heads) % dcp == 0")
    if tp % dcp != 0:
        raise ValueError("DCP requires tp % decode_context_parallel_size == 0")


def plan(args: dict[str, Any], honour_skips: bool) -> dict[str, list[tuple[str, tuple[int, ...]]]]:
    """Graphs by phase as the worker extracts them (``compile_or_warm_up_model``): a KV consumer
    or a vision-only engine skips prefill, a KV producer, pooling runner or vision-only engine
    skips decode, and vision is skipped without a vision config, for a language-only engine, or
    whenever prefill is skipped unless the engine is vision-only. ``honour_skips``: the
    ``VLLM_NEURON_SKIP_*_WARMUP`` switches count (compile runs)."""
    additional = args.get("additional_config") or {}
    vnc = additional.get(encoder_namespace())
    buckets = args["_buckets"]
    nbt, kv, seqs, contexts = buckets["nbt"], buckets["kv"], buckets["seqs"], buckets["contexts"]
    role = (args.get("kv_transfer_config") or {}).get("kv_role")
    encoder_only = bool(args.get("mm_encoder_only"))
    if encoder_only and additional.get("mm_language_model_only"):
        raise ValueError("mm_encoder_only and mm_language_model_only are mutually exclusive")
    if vnc is not None:
        vision_tp_dp(vnc, int(args.get("tensor_parallel_size", 1)))

    def env(name: str) -> bool:
        return honour_skips and flag(name)

    skip_prefill = env("VLLM_NEURON_SKIP_PREFILL_WARMUP") or role == "kv_consumer" or encoder_only
    skip_decode = (
        env("VLLM_NEURON_SKIP_DECODE_WARMUP")
        or role == "kv_producer"
        or args["_pooling"]
        or encoder_only
    )
    skip_vision = (
        vnc is None
        or not vnc.get("num_vision_tokens_buckets")
        or env("VLLM_NEURON_SKIP_ENCODER_WARMUP")
        or bool(additional.get("mm_language_model_only"))
        or (skip_prefill and not encoder_only)
    )
    phases: dict[str, list[tuple[str, tuple[int, ...]]]] = {}
    if not skip_prefill:
        phases["prefill"] = [("prefill", (t, s)) for t in nbt for s in (kv or [0])]
    if not skip_decode:
        phases["decode"] = [("decode", (b, c)) for b in seqs for c in contexts]
    if not skip_vision:
        phases["vision"] = [("vision", (t,)) for t in vnc["num_vision_tokens_buckets"]]
    return phases


def num_blocks(args: dict[str, Any], target: str) -> int:
    """KV blocks: HBM x gpu_memory_utilization (capped) / block bytes; an input shape of every
    graph, so it is in every key (contract section 2 step 4)."""
    if args.get("num_gpu_blocks_override"):
        return int(args["num_gpu_blocks_override"])
    fraction = float(args.get("gpu_memory_utilization", 0.9))
    cap = os.environ.get("VLLM_NEURON_KV_GMU_BUDGET_CAP_FRACTION")
    if cap is not None:
        fraction = min(fraction, float(cap))
    block = int(args.get("block_size") or 32)
    return int(HBM_GIB[target] * 2**30 * fraction) // (block * 2**20)


def compiler_args(args: dict[str, Any], target: str) -> list[str]:
    """neuronx-cc's extra arguments as ``load_model`` builds them ("Build compile options":
    ``--auto-cast=none``, ``-O<optimization level>``; vllm-project/vllm-neuron
    ``vllm_neuron/vllm/worker/neuron_model_runner.py`` ``load_model`` @9fc042ea), fp8's flag and
    the target."""
    cc_args = ["--auto-cast=none", f"-O{args['optimization_level']}"]
    if str(args.get("kv_cache_dtype", "auto")).startswith("fp8"):
        cc_args.append("--experimental-unsafe-fp8e4m3fn-as-fp8e4m3")
    return [*cc_args, f"--target={target}"]


def cache_key(graph: tuple[str, tuple[int, ...]], args: dict[str, Any], target: str) -> str:
    """md5[:32] over what vLLM-Neuron's ``create_cache_hash`` hashes (contract section 3)."""
    cc_args = compiler_args(args, target)
    factors = {
        "fx_graph": [graph[0], list(graph[1]), args["model"], args.get("dtype", "auto")],
        "inputs": {
            "kv_blocks": num_blocks(args, target),
            "block": args.get("block_size") or 32,
            "lora_slots": args["_lora"],
        },
        "replica_groups": args.get("tensor_parallel_size", 1),
        "versions": {
            d: importlib.metadata.version(d) for d in ("neuronx-cc", "nki", "libtorch-neuronx-lite")
        },
        "compiler_args": cc_args,
        "env": graph_env(target),
    }
    return hashlib.md5(json.dumps(factors, sort_keys=True).encode()).hexdigest()[:32]


PLUGIN_FLAGS = (
    "VLLM_NEURON_DISABLE_NKI_KERNELS",
    "VLLM_NEURON_DISABLE_INPUT_DEDUP",
    "VLLM_NEURON_SWITCH_CC",
    "VLLM_NEURON_DEBUG_MODE",
)
"""Switches of vllm_neuron/envs.py that change the traced graph or its kernels, each read as
``maybe_convert_bool(os.getenv(name)) or False`` (AWShtokoyo/vllm-neuron @eabd4c9f): NKI kernels
off, FX input dedup off (more HLO parameters, compile/backend.py), NeuronSwitch collectives,
debug mode (``fullgraph=False``)."""

LNC_DEFAULT = {"trn1": 1, "inf2": 1, "trn2": 2, "trn3": 2}
"""The logical NeuronCore config the compiler and the plugin use when NEURON_LOGICAL_NC_CONFIG is
unset: neuronx-cc defaults --logical-nc-config to 2 on trn2, trn1 supports only 1, and the plugin
hardcodes ``_DEFAULT_LNC_CONFIG = 2`` for current Trainium chips (utils/hardware_config.py)."""


def graph_env(target: str) -> dict[str, Any]:
    """What the process environment contributes to a graph, as the plugin and compiler read it:
    compiler flags and backend verbatim, each switch as a bool, the LNC as an int defaulted per
    target (so ``unset`` and the target's default are one graph)."""
    lnc = os.environ.get("NEURON_LOGICAL_NC_CONFIG")
    return {
        "NEURON_CC_FLAGS": os.environ.get("NEURON_CC_FLAGS"),
        "VLLM_NEURON_BACKEND": route() or os.environ.get("VLLM_NEURON_BACKEND"),
        "lnc": int(lnc) if lnc is not None else LNC_DEFAULT[target],
        **{name: bool(int(os.environ.get(name) or "0")) for name in PLUGIN_FLAGS},
    }


def compile_cache_dir() -> Path:
    """Where entries live. vllm-neuron derives ``$VLLM_CACHE_ROOT/neuron/compile_cache``
    (envs.get_neuron_compile_cache_dir); libtorch-neuronx-lite used directly roots its cache at
    ``NEURON_LIBTORCH_CACHE_ROOT/neuron/compile_cache`` (kiln kiln/compile_cache.py local_root,
    SDK 2.32 DLAMI). Which one wins inside vllm-neuron 0.24 is not visible (fidelity row B8), so the
    double takes the harsher reading: a set NEURON_LIBTORCH_CACHE_ROOT wins."""
    lnl_root = os.environ.get("NEURON_LIBTORCH_CACHE_ROOT")
    vllm_root = os.environ.get("VLLM_CACHE_ROOT") or str(Path.home() / ".cache" / "vllm")
    return Path(lnl_root or vllm_root) / "neuron" / "compile_cache"


def miss_is_fatal(serving: bool) -> str | None:
    """The switch that makes a local miss a RuntimeError instead of a compile, if one is set:
    VLLM_NEURON_DISABLE_WARMUP_COMPILE at serve, or NEURON_LIBTORCH_ASSERT_CACHE_HIT (LNL 2.11's
    name; with no remote cache a miss fails, kiln bench/results/2026-10-07-precompile-start.md) in
    any run, a CPU compile included."""
    if serving:
        return "VLLM_NEURON_DISABLE_WARMUP_COMPILE"
    if flag("NEURON_LIBTORCH_ASSERT_CACHE_HIT"):
        return "NEURON_LIBTORCH_ASSERT_CACHE_HIT"
    return None


def is_complete(entry: Path) -> bool:
    key = entry.name
    names = ("graph.hlo", f"graph_{key}.neff", ".compilation_complete")
    meta = entry / ".artifact_metadata_v0.json"
    if not all((entry / n).is_file() for n in names) or not meta.is_file():
        return False
    if json.loads(meta.read_text())["cache_key"] != key:
        raise RuntimeError(
            f"Cache key mismatch: expected '{key}', found in {entry}. The cache entry may have "
            "been corrupted or moved."
        )
    return True


def trace_workers() -> int:
    """Children of the extraction step's trace pool per rank: ``VLLM_NEURON_PARALLEL_TRACE_WORKERS``,
    default 8, each "~3-4 GB" (AWShtokoyo/vllm-neuron ``vllm_neuron/envs.py`` @eabd4c9f,
    ``neuron_worker.py`` ``_extract_graphs`` docstring @01c89e38; fidelity row A11)."""
    return int(os.environ.get("VLLM_NEURON_PARALLEL_TRACE_WORKERS") or "8")


def fail_like_neuronx_cc(graph: tuple[str, tuple[int, ...]]) -> None:
    mode, _, arg = os.environ.get("NEURON_DOUBLE_FAIL", "").partition(":")
    workers = int(os.environ.get("NEURON_LIBTORCH_PARALLEL_COMPILE_WORKERS", "8"))
    if mode == "exit70-once" and not Path(arg).exists():
        Path(arg).write_text("failed once")
        print("ERROR: neuronx-cc terminated abnormally", flush=True)
        sys.exit("RuntimeError: neuronx-cc compilation failed with 70. Check compiler logs.")
    if mode == "ncc" and graph == ("prefill", (int(arg), 0)):
        print(f"[NCC_INLA001] Unhandled exception in prefill bucket {arg}", flush=True)
        sys.exit("RuntimeError: neuronx-cc compilation failed with 70. Check compiler logs.")
    if mode == "oom-above" and workers > int(arg):
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "oom-trace-above" and trace_workers() > int(arg):
        os.kill(os.getpid(), signal.SIGKILL)  # the trace pool's children exhaust host memory
    if mode == "hang":
        time.sleep(3600)


def write_entry(
    root: Path,
    key: str,
    graph: tuple[str, tuple[int, ...]],
    kernel_refs: str = "",
    cc_args: tuple[str, ...] = (),
) -> None:
    """One entry as ``_store_local`` leaves it: artifacts, then the marker last; beside it the
    lock file at the root, a temporary file and a rank capture folder. ``kernel_refs``: the
    HLO text that references the graph's NKI kernel binaries (:func:`compile_nki_kernels`);
    ``cc_args``: neuronx-cc's extra arguments, saved in ``command.txt`` as ``neuroncc_compile``
    saves the command it ran (vllm-neuron ``compile/backend.py``)."""
    entry = root / key
    (entry / "rank0").mkdir(parents=True, exist_ok=True)
    (root / f".{key}.compilation_metadata.lock").write_text("")
    (entry / "rank0" / "capture.bin").write_bytes(b"capture scratch")
    (entry / f"graph_{key}.neff.tmp.123").write_bytes(b"partial")
    (entry / "graph.hlo").write_text(f"HloModule {graph[0]} {graph[1]}\n{kernel_refs}")
    (entry / f"graph_{key}.neff").write_bytes(hashlib.sha256(key.encode()).digest() * 64)
    command = ["neuronx-cc", "compile", "--framework=XLA", "graph.hlo", *cc_args]
    (entry / "command.txt").write_text(" ".join(command) + "\n")
    meta = {"cache_key": key, "io_map": {}, "unused_input_indices": [], "output_count": 1}
    (entry / ".artifact_metadata_v0.json").write_text(json.dumps(meta))
    (entry / ".compilation_complete").write_text(f"completed:{time.time()}\nneff_size:2048\n")


def capture_backend_disabled() -> bool:
    """``NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND``: the runner's ``load_model`` leaves the
    capture backend ``None``, so ``compile_or_warm_up_model`` extracts and compiles nothing and
    start-up goes on, exit 0 (fidelity rows A7, E10: vllm-project/vllm-neuron
    ``vllm_neuron/vllm/worker/neuron_model_runner.py`` ``load_model`` @9fc042ea; worker
    ``compile_or_warm_up_model``, AWShtokoyo/vllm-neuron @01c89e38). Read ``bool(int(v))``."""
    return bool(int(os.environ.get("NEURON_LIBTORCH_DISABLE_GRAPH_CAPTURE_BACKEND") or "0"))


def nki_intermediate_root() -> Path | None:
    """Where the NKI compiler leaves kernel binaries: ``/var/tmp/nki-intermediate-cache`` on a
    real host (foxl-ai/kiln ``kiln/compile_cache.py`` docstring, SDK 2.32, measured). The double
    takes it from the test-only ``NEURON_DOUBLE_NKI_INTERMEDIATE_CACHE`` and, without it, builds
    graphs that call no NKI kernel (tests never write the real /var/tmp)."""
    root = os.environ.get("NEURON_DOUBLE_NKI_INTERMEDIATE_CACHE")
    return Path(root) if root else None


def compile_nki_kernels(root: Path, graph: tuple[str, tuple[int, ...]]) -> str:
    """The NKI kernel a graph of this kind calls (one per graph kind and first dimension, so
    graphs share kernels), compiled or taken from the persistent NKI cache, and the HLO text
    that references its binary by absolute path.

    As the plugin does (fidelity rows B6, B7): the result is a JSON record
    ``{compile_cache}/nki/{key}.json`` with no completion marker, written through a temporary
    file and guarded by ``{key}.lock`` (Infinity-AI-Institute/vllm-neuron
    ``vllm_neuron/nki/nki_cache.py`` ``compile_with_cache``, ``_put_nki_cache_in_dir``
    @117bd89d); the binary itself lies outside that cache, under the NKI intermediate root, and
    the graph's custom call names it (``klir_binary.binary``; kiln ``kiln/compile_cache.py``)."""
    intermediate = nki_intermediate_root()
    if intermediate is None:
        return ""
    name = f"vllm_neuron.nki.{graph[0]}_kernel_{graph[1][0]}"
    key = hashlib.sha256(name.encode()).hexdigest()[:32]
    cache = root / "nki"
    cache.mkdir(parents=True, exist_ok=True)
    (cache / f"{key}.lock").write_text("")
    binary = intermediate / key / f"{name}.klir"
    record = cache / f"{key}.json"
    if not record.is_file() or not binary.is_file():  # a record whose binary is gone: a miss
        binary.parent.mkdir(parents=True, exist_ok=True)
        binary.write_bytes(hashlib.sha256(name.encode()).digest() * 16)
        tmp = cache / f"{key}.json.tmp.{os.getpid()}"
        tmp.write_text(json.dumps({"schema_version": 2, "kernel_binary": str(binary)}))
        tmp.replace(record)
    return f'custom_call_target="AwsNeuronCustomNativeKernel", klir_binary.binary="{binary}"\n'


def require_nki_binaries(entry: Path) -> None:
    """Loading a graph whose NKI kernel binary is absent fails as measured on SDK 2.32: neuronx-cc
    reports ``NCC_EVRF059 Kernel file '...' referenced by AwsNeuronCustomNativeKernel instruction
    does not exist on the host`` and exits 70, taking every rank down (fidelity row B7; kiln
    ``kiln/compile_cache.py`` docstring, 2026-10-03)."""
    for line in (entry / "graph.hlo").read_text().splitlines():
        _, found, rest = line.partition('klir_binary.binary="')
        path = rest.split('"', 1)[0]
        if found and not Path(path).is_file():
            print(
                f"ERROR [NCC_EVRF059] Kernel file '{path}' referenced by "
                "AwsNeuronCustomNativeKernel instruction does not exist on the host",
                flush=True,
            )
            sys.exit("RuntimeError: neuronx-cc compilation failed with 70. Check compiler logs.")


def trace(root: Path, key: str, graph: tuple[str, tuple[int, ...]]) -> None:
    """A device start traces each graph before it loads its NEFF, unless the Precompile Cache
    holds the trace ("A warm start then loads the saved trace and skips the trace step",
    how-to-precompile-cache.md, 2026-10-13); with the cache on (:func:`precompile_cache_on`) a
    fresh trace is saved. The page's layout section was not readable: the double keeps a trace at
    ``$VLLM_CACHE_ROOT/neuron/precompile_cache/<graph key>/trace.bin``. Each start appends
    ``traced`` or ``reused`` and the graph to ``NEURON_DOUBLE_TRACES`` (test-only)."""
    saved = root.parent / "precompile_cache" / key / "trace.bin"
    on = precompile_cache_on(serving=True)
    outcome = "reused" if on and saved.is_file() else "traced"
    if on and outcome == "traced":
        saved.parent.mkdir(parents=True, exist_ok=True)
        saved.write_bytes(hashlib.sha256(b"trace " + key.encode()).digest())
    if os.environ.get("NEURON_DOUBLE_TRACES"):
        with open(os.environ["NEURON_DOUBLE_TRACES"], "a") as f:
            f.write(f"{outcome} {graph[0]} {' '.join(map(str, graph[1]))}\n")


class NeuronPlatform:
    """Builds the engine: compile (CPU compile mode) or load (serve) every graph of the run."""

    def build_engine(self, args: dict[str, Any]) -> int:
        target = os.environ.get("NEURON_PLATFORM_TARGET_OVERRIDE") or os.environ.get(
            "NEURON_DOUBLE_DEVICE", ""
        )
        if target not in HBM_GIB:
            raise RuntimeError(f"NEURON_PLATFORM_TARGET_OVERRIDE: unknown target {target!r}")
        root = compile_cache_dir()
        root.mkdir(parents=True, exist_ok=True)
        serving = flag("VLLM_NEURON_DISABLE_WARMUP_COMPILE")
        args = resolve_config(args, HBM_GIB[target])
        if not serving and capture_backend_disabled():
            print("Model warmup completed", flush=True)
            return 0
        # vLLM's engine core: a helper process that outlives a worker that returns.
        if not serving:
            helper = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(600)"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if os.environ.get("NEURON_DOUBLE_HELPERS"):
                with open(os.environ["NEURON_DOUBLE_HELPERS"], "a") as f:
                    f.write(f"{helper.pid}\n")
        loaded = 0
        for graphs in plan(args, honour_skips=not serving).values():
            for graph in graphs:
                key = cache_key(graph, args, target)
                entry = root / key
                if is_complete(entry):
                    if serving:
                        require_nki_binaries(entry)
                        trace(root, key, graph)
                    (entry / ".cache_accessed").write_text("hit")
                    loaded += 1
                    continue
                fatal = miss_is_fatal(serving)
                if fatal:
                    raise RuntimeError(
                        f"{fatal}: local compile cache miss for key "
                        f"{key}. All graphs must be pre-compiled when warmup compilation is "
                        "disabled."
                    )
                fail_like_neuronx_cc(graph)
                time.sleep(float(os.environ.get("NEURON_DOUBLE_GRAPH_SECONDS", "0")))
                refs, cc_args = compile_nki_kernels(root, graph), compiler_args(args, target)
                write_entry(root, key, graph, refs, tuple(cc_args))
                record = os.environ.get("NEURON_DOUBLE_RECORD")
                if record:
                    with open(record, "a") as f:
                        f.write(f"{graph[0]} {' '.join(map(str, graph[1]))} {key}\n")
        print("Model warmup completed", flush=True)
        return loaded
