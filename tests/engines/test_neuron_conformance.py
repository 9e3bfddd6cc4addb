"""neuronbuild's plan equals what the test double of vLLM-Neuron resolves and extracts, graph for
graph, over generated neuron recipes (issue 18 item 9; the double's rules are its own, written
from the plugin: ``tests/neuron_double/CONFORMANCE.md``).

The fast property runs the double's own code in-process: the recipe's engine arguments go through
the command line compile and serve pass (:func:`~neuronbuild.engines.vllm_args.vllm_cli_args`),
the double's API server parser, its ``resolve_config`` (with that command line as ``sys.argv``)
and its ``plan`` under each compile unit's skip switches. The slow property compiles a few
generated recipes through the double's subprocesses and serves every compiled manifest.
"""

from __future__ import annotations

import importlib
import io
import json
import re
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, Phase, event, given, reject, settings
from hypothesis import strategies as st

from neuronbuild import envs
from neuronbuild.engines import arg_sources
from neuronbuild.engines.neuron.engine import PHASE_OF_KIND
from neuronbuild.engines.registry import get_engine
from neuronbuild.engines.vllm_args import vllm_cli_args
from neuronbuild.errors import RecipeInvalid
from neuronbuild.graph import Graph
from neuronbuild.orchestrate.compile import compile_recipe
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, load_recipe, parse_recipe
from neuronbuild.store.cas import Store
from tests.conftest import NEURON_TOOLCHAIN, neuron_recipe
from tests.engines.test_neuron_engine import compiled_graphs, double, setenv  # noqa: F401 (fixture)
from tests.engines.test_neuron_phases import QWEN3_VL_CONFIG, serve_and_count
from tests.lib.hub import cache_config
from tests.lib.properties import examples
from tests.neuron_double import INSTALLS, SITE, install

HEADS = {"num_attention_heads": 32, "num_key_value_heads": 8}
"""Head counts as a real config.json states them (the double, like vLLM, fills absent ones from
transformers' defaults, which neuronbuild does not read)."""

MODELS = {
    "text": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **HEADS},
    "pooling": {
        "architectures": ["Qwen3ForSequenceClassification"],
        "model_type": "qwen3",
        **HEADS,
    },
    "vl": QWEN3_VL_CONFIG,
    "qwen35": {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "vision_config": {"spatial_merge_size": 3, "patch_size": 14},
    },
    "internvl": {
        "architectures": ["InternVLChatModel"],
        "downsample_ratio": 0.25,
        "vision_config": {},
    },
    "mqa": {  # one KV head: any dcp that divides the TP passes the platform's head checks
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_attention_heads": 32,
        "num_key_value_heads": 1,
    },
    "gqa": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
    },
}
"""The local model folders generated recipes run on: ``./<name>/config.json`` (three vision
architectures, each with its own merge factor: 2 ** 2, 3 ** 2 and 1 / 0.25 ** 2)."""

HUB = "hub-org"
"""Every model of :data:`MODELS` is also a hub model, ``hub-org/<name>``, in the Hugging Face
cache the ``models`` fixture builds (at ``main``, as vLLM reads it offline)."""

SEGMENTS = (512, 1024, 2048, 4096, 8192)


@st.composite
def neuron_config(draw: st.DrawFn, mml: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Bucket settings the plugin accepts, and the top-level arguments they go with."""
    top: dict[str, Any] = {"max_num_seqs": draw(st.integers(1, 16))}
    nc: dict[str, Any] = {}
    segmented = draw(st.booleans()) and mml > 512
    if segmented:
        segment = draw(st.sampled_from([s for s in SEGMENTS if s < mml]))
        if draw(st.booleans()):
            nc["kv_segment_size_buckets"] = [segment]
            top["max_num_batched_tokens"] = draw(st.sampled_from([None, segment]))
        else:
            top["max_num_batched_tokens"] = segment
        top["enable_prefix_caching"] = draw(st.booleans())
    else:
        mnbt = draw(st.sampled_from([mml, 2 * mml, None]))  # None: left to the plan (D23)
        top["max_num_batched_tokens"] = mnbt
        if draw(st.booleans()):
            powers = [p for p in (128, 256, 512, 1024, 2048, 4096) if p < mml]
            nc["num_batched_tokens_buckets"] = [
                *draw(st.lists(st.sampled_from(powers), unique=True).map(sorted)),
                mml,
            ]
    if draw(st.booleans()):
        below = st.lists(st.integers(1, top["max_num_seqs"] - 1), unique=True, max_size=4)
        seqs = draw(below.map(sorted)) if top["max_num_seqs"] > 1 else []
        nc["num_seqs_buckets"] = [*seqs, top["max_num_seqs"]]
    contexts = list(range(128, mml, 128))
    if draw(st.booleans()):
        nc["decode_context_length_buckets"] = draw(
            st.lists(st.sampled_from(contexts), unique=True, max_size=3).map(sorted)
        )
    return nc, top


@st.composite
def vision(draw: st.DrawFn, mml: int) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """A vision_neuron_config (None: the platform makes one) and the vision arguments."""
    args: dict[str, Any] = {}
    if draw(st.booleans()):
        args["mm_processor_kwargs"] = {"max_pixels": draw(st.sampled_from([256, 3000, 9000])) * 256}
    role = draw(st.sampled_from([None, None, "mm_encoder_only", "mm_language_model_only"]))
    if role == "mm_encoder_only":
        args["mm_encoder_only"] = True
    args["_lm_only"] = role == "mm_language_model_only"
    if draw(st.booleans()):
        return None, args
    vnc: dict[str, Any] = {}
    block = draw(st.sampled_from([None, 1024, 2048]))
    if block:
        vnc["vision_attention_block_size"] = block
    choice = draw(st.sampled_from(["default", "cap", "list"]))
    if choice == "cap":
        vnc["max_vision_seq_len"] = draw(st.sampled_from([1024, 2048, 8192, 65536]))
    elif choice == "list":
        vnc["num_vision_tokens_buckets"] = draw(
            st.lists(st.sampled_from([1024, 2048, 4096, 8192]), min_size=1, unique=True).map(sorted)
        )
    if draw(st.booleans()):
        vnc[draw(st.sampled_from(["tp_size", "dp_size"]))] = draw(st.sampled_from([1, 2, 4]))
    return vnc, args


RELEASES = {
    "2.31.1": "vision_neuron_config",
    "2.32.0": "vision_neuron_config",
    "2.33.0": "encoder_neuron_config",
    "2.33.1": "encoder_neuron_config",
    "2.34.0": "encoder_neuron_config",
}
"""Each release the double is installed as, with the name it reads the encoder settings under
(0.29's ``encoder_neuron_config``: configuration reference of v2.33.0, 2026-10-16)."""


@st.composite
def recipes(draw: st.DrawFn) -> dict[str, Any]:
    """A neuron recipe's data on one of :data:`MODELS` (relative paths: run from their folder),
    pinned to one of :data:`RELEASES`."""
    release = draw(st.sampled_from(sorted(RELEASES)))
    mml = draw(st.sampled_from([512, 1024, 2048, 4096, 8192]))
    nc, top = draw(neuron_config(mml))
    model = draw(st.sampled_from(["vl", "text", "vl", "pooling", "qwen35", "internvl"]))
    args: dict[str, Any] = {
        "model": draw(st.sampled_from([f"./{model}", f"{HUB}/{model}"])),
        "max_model_len": mml,
        "tensor_parallel_size": draw(st.sampled_from([1, 2, 4, 8])),
        "enable_prefix_caching": draw(st.sampled_from([False, None])),  # None: left out
        **top,
    }
    block = draw(st.sampled_from([None, 16, 32, 64]))
    if block:
        args["block_size"] = block
    level = draw(st.sampled_from([None, 0, 1, 2, 3]))
    if level is not None:
        args["optimization_level"] = level
    role = draw(st.sampled_from([None, None, "kv_producer", "kv_consumer"]))
    if role:
        args["kv_transfer_config"] = {"kv_connector": "NeuronNixlConnector", "kv_role": role}
    if draw(st.booleans()):
        args["runner"] = draw(st.sampled_from(["auto", "generate", "pooling"]))
    if draw(st.integers(0, 3 if release == "2.34.0" else 9)) == 0:  # refused before 2.34
        args["enable_lora"] = True
        args["max_loras"] = draw(st.sampled_from([1, 4]))
    additional: dict[str, Any] = {"neuron_config": nc}
    if "vision_config" in MODELS[model]:
        vnc, vision_args = draw(vision(mml))
        if vision_args.pop("_lm_only"):
            additional["mm_language_model_only"] = True
        args.update(vision_args)
        if vnc is not None:
            additional[RELEASES[release]] = vnc
    args["additional_config"] = additional
    if draw(st.booleans()):
        broken(draw(st.sampled_from(sorted(BREAKS))), args, nc)
    return neuron_recipe(toolchain=dict(PINS[release]), **args)


PINS = {"2.32.0": NEURON_TOOLCHAIN, **INSTALLS}
"""What a recipe of each release pins: what the double reports installed."""


@pytest.fixture(scope="module")
def sites() -> Iterator[dict[str, Path]]:
    """The double's installation as each release of :data:`RELEASES`. The double's vLLM has no
    argument parser for validate to read (``arg_sources.read_installed``: a child process that
    fails after seconds, once per vLLM version); these tests are about plans, so validate is told
    at once that there are no tables, as the read would conclude."""
    root = Path(tempfile.mkdtemp(prefix="nb-releases-"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arg_sources, "read_installed", lambda distribution, version: None)
        yield {"2.32.0": SITE, **{release: install(release, root) for release in INSTALLS}}
    shutil.rmtree(root)


def release_of(data: dict[str, Any]) -> str:
    return next(r for r, pins in PINS.items() if pins == data["toolchain"])


BREAKS: dict[str, tuple[str, Any]] = {
    "nbt last": ("nc", {"num_batched_tokens_buckets": [128]}),
    "nbt order": ("nc", {"num_batched_tokens_buckets": [256, 128]}),
    "nbt empty": ("nc", {"num_batched_tokens_buckets": []}),
    "single-shot too long": ("top", {"max_model_len": 32768, "max_num_batched_tokens": 32768}),
    "unsupported chunk": ("top", {"max_num_batched_tokens": 768}),
    "kv size": ("nc", {"kv_segment_size_buckets": [768]}),
    "kv two sizes": ("nc", {"kv_segment_size_buckets": [512, 1024]}),
    "kv vs nbt": ("nc", {"kv_segment_size_buckets": [512], "num_batched_tokens_buckets": [1024]}),
    "apc": ("top", {"enable_prefix_caching": True}),
    "seqs last": ("nc", {"num_seqs_buckets": [32]}),
    "seqs empty": ("nc", {"num_seqs_buckets": []}),
    "ctx tile": ("nc", {"decode_context_length_buckets": [100]}),
    "ctx at mml": ("nc", {"decode_context_length_buckets": [8192]}),
    "dcp 2": ("top", {"decode_context_parallel_size": 2}),
    "dcp 8": ("top", {"decode_context_parallel_size": 8}),
    "dcp 32": ("top", {"decode_context_parallel_size": 32}),
}
"""One rule-breaking edit per name (rows D3-D8, D10), applied to half of the recipes: to
the top-level engine arguments or to ``neuron_config``. Some edits break nothing for a given
recipe (APC with segmented prefill, DCP whose stride divides every bucket)."""


def broken(name: str, args: dict[str, Any], nc: dict[str, Any]) -> None:
    where, edit = BREAKS[name]
    (nc if where == "nc" else args).update(edit)
    if name.startswith("single-shot"):
        for key in ("kv_segment_size_buckets", "num_batched_tokens_buckets"):
            nc.pop(key, None)
    if name == "unsupported chunk":
        nc.pop("kv_segment_size_buckets", None)


@pytest.fixture(scope="module")
def models() -> Iterator[Path]:
    """A folder holding every model of :data:`MODELS` and a recipe file to name as the source."""
    import huggingface_hub.constants

    root = Path(tempfile.mkdtemp(prefix="nb-conformance-"))
    for name, config in MODELS.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
        cache_config(root / "hub", f"{HUB}/{name}", config, "0" * 40)
    (root / "r.yaml").write_text("")
    with pytest.MonkeyPatch.context() as mp:
        setenv(mp, "HF_HUB_CACHE", str(root / "hub"))  # the compile and serve processes' too
        mp.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root / "hub"))
        yield root
    shutil.rmtree(root)


@pytest.fixture(scope="module")
def the_double() -> Iterator[tuple[ModuleType, ModuleType]]:
    """The double's platform and API server modules, imported from ``SITE`` in this process
    (any ``vllm`` module already imported is set aside and put back after the module's tests)."""
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in ("vllm", "vllm_neuron")}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(SITE))
    importlib.invalidate_caches()
    try:
        platform = importlib.import_module("vllm_neuron.platform")
        server = importlib.import_module("vllm.entrypoints.openai.api_server")
        assert Path(str(platform.__file__)).is_relative_to(SITE)
        assert Path(str(server.__file__)).is_relative_to(SITE)
        yield platform, server
    finally:
        sys.path.remove(str(SITE))
        for name in [n for n in sys.modules if n.split(".")[0] in ("vllm", "vllm_neuron")]:
            del sys.modules[name]
        sys.modules.update(saved)


MODELLED = {
    "D3-D5 prefill buckets": ("max_num_batched_tokens", "max_model_len", "num_batched_tokens_"),
    "D5 kv segments": ("kv_segment_size_buckets",),
    "D6 APC": ("enable_prefix_caching",),
    "D7 num_seqs": ("num_seqs_buckets",),
    "D8 decode contexts": ("decode_context_length_buckets",),
    "D10-D11 DCP": (
        "decode_context_parallel_size",
        "long_prefill_token_threshold",
        "kv_connector",
        "tensor_parallel_size",
    ),
    "D14-D16 vision": ("vision_neuron_config", "encoder_neuron_config"),
    "LoRA": ("enable_lora",),
}
"""Rule families the double refuses at start (``vllm_neuron/buckets.py``, ``platform.py``), by
the field neuronbuild names. Every other refusal is one the double cannot model and is skipped:
speculative decoding, "builds no graph" (checked below)."""

DOUBLE_SAYS = {
    "D6 APC": ("Automatic Prefix Caching",),
    "D7 num_seqs": ("num_seqs_buckets",),
    "D8 decode contexts": ("decode_context_length_buckets",),
    "D10-D11 DCP": ("DCP shard stride", "DCP requires"),
    "D5 kv segments": ("kv_segment_size_buckets", "segment size"),
    "D3-D5 prefill buckets": ("num_batched_tokens_buckets", "Single-shot", "chunked prefill"),
    "LoRA": ("LoRA",),
    "D14-D16 vision": ("vision", "Largest bucket", "world_size"),
}
"""The family of the double's ValueError, by its message (first match wins)."""


OWN_RULES = ("is required unless additional_config.neuron_config.num_batched_tokens_buckets",)
"""neuronbuild's own refusals, which no plugin rule matches: a prefill budget left to vLLM's
default (which differs by version and entry point; the double takes the API server's). A recipe
refused for one may meet any plugin rule first at start."""


def family_of_refusal(refusal: str) -> str | None:
    """The :data:`MODELLED` family of one neuronbuild refusal (``field=value: message``); None
    for one of :data:`OWN_RULES`."""
    if any(words in refusal for words in OWN_RULES):
        return None
    field = refusal.split(":")[0].split("=")[0]
    if field.endswith(".num_batched_tokens_buckets") and "kv_segment_size_buckets" in refusal:
        return "D5 kv segments"
    return next((f for f, names in MODELLED.items() if any(n in field for n in names)), None)


def family_of_error(error: Exception) -> str | None:
    """The :data:`MODELLED` family of the double's start-up error, None for an unknown one."""
    said = str(error)
    return next((f for f, words in DOUBLE_SAYS.items() if any(w in said for w in words)), None)


def words(graph: Graph) -> str:
    return " ".join([graph.kind, *(str(v) for _, v in graph.dims)])


def extracted(
    platform: ModuleType, resolved: dict[str, Any], skip: set[str], mp: pytest.MonkeyPatch
) -> Counter[str]:
    """The graphs the double extracts from ``resolved`` with the switches of ``skip`` set."""
    for phase, switch in envs.VLLM_NEURON_SKIP_WARMUP.items():
        if phase in skip:
            mp.setenv(switch, "1")
        else:
            mp.delenv(switch, raising=False)
    phases = platform.plan(resolved, honour_skips=True)
    return Counter(f"{k} {' '.join(map(str, dims))}" for g in phases.values() for k, dims in g)


def as_started(args: dict[str, Any]) -> dict[str, Any]:
    """A refused recipe's arguments as compile would pass them were it otherwise valid:
    ``max_num_batched_tokens`` left out becomes the last listed prefill bucket (or kv segment)
    the plan takes (:meth:`NeuronEngine.start_args`, fidelity row D23), so the double's refusal
    is compared for the recipe's other rules, not for the API server's default."""
    nc = (args.get("additional_config") or {}).get("neuron_config") or {}
    listed = nc.get("num_batched_tokens_buckets") or nc.get("kv_segment_size_buckets")
    if args.get("max_num_batched_tokens") is None and isinstance(listed, list) and listed:
        return {**args, "max_num_batched_tokens": listed[-1]}
    return args


def resolve(
    platform: ModuleType,
    server: ModuleType,
    args: dict[str, Any],
    mp: pytest.MonkeyPatch,
    target: str = "trn2",
) -> dict[str, Any]:
    """The double's configuration of ``args`` (for a valid recipe: the engine's
    :meth:`~neuronbuild.engines.base.Engine.start_args`), reached as the compile worker and serve
    reach it on a ``target`` device: the API server's command line, parsed by the server,
    resolved by the platform."""
    argv = vllm_cli_args(args)
    mp.setattr(sys, "argv", ["api_server", *argv])
    parsed = server.parse(argv)
    resolved: dict[str, Any] = platform.resolve_config(parsed, platform.HBM_GIB[target])
    return resolved


@settings(
    max_examples=examples(200),
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(data=recipes())
@pytest.mark.slow
def test_the_plan_equals_what_the_double_extracts_graph_for_graph(
    models: Path,
    the_double: tuple[ModuleType, ModuleType],
    sites: dict[str, Path],
    data: dict[str, Any],
) -> None:
    platform, server = the_double
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(models)
        mp.syspath_prepend(str(sites[release_of(data)]))  # the double's release: its metadata
        refusals: list[str] = []
        try:
            recipe = parse_recipe(data, source=str(models / "r.yaml"))
        except RecipeInvalid as exc:
            recipe, refusals = None, [str(e) for e in exc.errors]
        try:
            args = {k: v for k, v in data.items() if k not in ("name", "target", "toolchain")}
            started = get_engine("neuron").start_args(recipe) if recipe else as_started(args)
            resolved = resolve(platform, server, started, mp, data["target"])
            everything = extracted(platform, resolved, set(), mp)
        except (ValueError, KeyError, TypeError) as error:
            # The plugin refuses it at start: neuronbuild must refuse it before compiling, for
            # the same rule (neuronbuild lists every refusal, the plugin stops at its first).
            assert recipe is None, (error, data)
            family = family_of_error(error)
            if any(words in r for r in refusals for words in OWN_RULES):
                event("refused by neuronbuild's own rule, by the double for one of its own")
                reject()
            assert family in {family_of_refusal(r) for r in refusals}, (error, refusals)
            event(f"refused by both: {family}")
            reject()
        families = {family_of_refusal(r) for r in refusals} - {None}
        # A rule the double models that neuronbuild enforces: the double must refuse it too.
        assert not families, f"the double starts what neuronbuild refuses: {refusals} {data}"
        if recipe is None:
            # "Builds no graph" is a claim about the plugin: the double must extract none.
            if any("builds no graph" in r for r in refusals):
                assert everything == Counter(), data
            event("refused by neuronbuild only, for a rule the double does not model")
            reject()
        plan = build_plan(recipe)
        kinds = ["+".join(sorted({PHASE_OF_KIND[g.kind] for g in u.graphs})) for u in plan.units]
        event(f"{data['model']} units: {' '.join(kinds)}")
        assert everything == Counter(map(words, plan.graphs)), data
        for unit in plan.units:
            built = {PHASE_OF_KIND[g.kind] for g in unit.graphs}
            skip = set(envs.VLLM_NEURON_SKIP_WARMUP) - built
            assert extracted(platform, resolved, skip, mp) == Counter(map(words, unit.graphs))
        # One configuration at compile and serve (row B10): the O-level comes from the argv.
        level = data.get("optimization_level")
        assert resolved["optimization_level"] == (1 if level is None else level)


START_REFUSALS = {
    "D3 last": ({"nbt": [128, 1024]}, "Last bucket in num_batched_tokens_buckets must equal"),
    "D3 order": ({"nbt": [1024, 128, 2048]}, "num_batched_tokens_buckets must be in strictly"),
    "D4 single-shot": ({"max_model_len": 32768, "max_num_batched_tokens": 32768}, "Single-shot"),
    "D4 chunk": ({"max_num_batched_tokens": 768}, "is not a supported chunked prefill size"),
    "D5 size": ({"kv": [768]}, "is not a supported segment size"),
    "D5 one size": ({"kv": [512, 1024]}, "Only one segment size is currently supported"),
    "D5 match": ({"kv": [512], "nbt": [2048]}, "num_batched_tokens_buckets must match"),
    "D6 APC": ({"enable_prefix_caching": True}, "Automatic Prefix Caching (APC) requires"),
    "D7 last": ({"seqs": [1, 2]}, "Last bucket in num_seqs_buckets must equal max_num_seqs (4)"),
    "D8 tile": ({"ctx": [100]}, "must be divisible by 128"),
    "D8 below": ({"ctx": [2048]}, "must be strictly less than max_model_len=2048"),
    "D10 none": (
        {"model": "./mqa", "decode_context_parallel_size": 32, "max_num_batched_tokens": 512},
        "No prefill buckets are divisible by the DCP shard stride",
    ),
    "D10 largest": (
        {
            "model": "./mqa",
            "decode_context_parallel_size": 32,
            "max_model_len": 1536,
            "max_num_batched_tokens": 1536,
        },
        "The largest prefill bucket (max_num_batched_tokens = 1536) is not divisible",
    ),
    "D11 tp": (
        {"model": "./gqa", "tensor_parallel_size": 34, "decode_context_parallel_size": 4},
        "DCP requires tp % decode_context_parallel",
    ),
    "D11 threshold": (
        {"decode_context_parallel_size": 2, "long_prefill_token_threshold": 100},
        "DCP requires long_prefill_token_threshold divisible by 64",
    ),
    "D11 connector": (
        {"decode_context_parallel_size": 2, "kv_transfer_config": {"kv_connector": "Nixl"}},
        "DCP requires kv_connector='NeuronNixlConnector'",
    ),
    "D11 kv heads": (
        {"model": "./gqa", "tensor_parallel_size": 8, "decode_context_parallel_size": 2},
        "DCP requires tensor_parallel_size >= 16",
    ),
    "D11 gqa ratio": (
        {"model": "./gqa", "tensor_parallel_size": 48, "decode_context_parallel_size": 3},
        "DCP requires (num_q_heads // num_kv_heads) % dcp == 0",
    ),
}
"""One refusal per rule of rows D3-D8, D10 and D11: edits to a single-shot text recipe (max_model_len
2048, 4 sequences, APC off; ``nbt``/``kv``/``seqs``/``ctx`` name ``neuron_config``'s bucket
lists) and a fragment of the plugin's message (``bucket_utils.py`` @10c6804d; the runner's APC
ValueError @9fc042ea)."""

LISTS = {
    "nbt": "num_batched_tokens_buckets",
    "kv": "kv_segment_size_buckets",
    "seqs": "num_seqs_buckets",
    "ctx": "decode_context_length_buckets",
}


@pytest.mark.parametrize("case", sorted(START_REFUSALS))
def test_the_double_refuses_at_start_what_the_plugin_refuses(
    models: Path, the_double: tuple[ModuleType, ModuleType], case: str
) -> None:
    """The double raises the plugin's ValueError at config resolution, and neuronbuild refuses
    the same recipe for a rule of the same family (fidelity rows D3-D8, D10; E9)."""
    platform, server = the_double
    edits, message = START_REFUSALS[case]
    top = {k: v for k, v in edits.items() if k not in LISTS}
    nc = {LISTS[k]: v for k, v in edits.items() if k in LISTS}
    args = {"model": "./text", "max_model_len": 2048, "max_num_batched_tokens": 2048}
    args |= {"max_num_seqs": 4, "enable_prefix_caching": False, **top}
    data = neuron_recipe(**args, additional_config={"neuron_config": nc})
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(models)
        engine_args = {k: v for k, v in data.items() if k not in ("name", "target", "toolchain")}
        with pytest.raises(ValueError, match=re.escape(message)) as raised:
            resolve(platform, server, engine_args, mp)
        with pytest.raises(RecipeInvalid) as refused:
            parse_recipe(data, source=str(models / "r.yaml"))
    families = {family_of_refusal(str(e)) for e in refused.value.errors}
    assert family_of_error(raised.value) in families, refused.value.errors


def write_recipe(folder: Path, data: dict[str, Any]) -> Recipe | None:
    """``data`` as a recipe file beside the model folders, or None if neuronbuild refuses it."""
    for name, config in MODELS.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        (folder / name / "config.json").write_text(json.dumps(config))
    path = folder / "r.yaml"
    path.write_text(yaml.safe_dump({**data, "name": "conf"}, sort_keys=False))
    try:
        return load_recipe(path)
    except RecipeInvalid:
        return None


@pytest.mark.slow
@settings(
    max_examples=5,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # each shrink step compiles again
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much],
)
@given(data=recipes())
def test_every_compiled_manifest_serves_every_graph_from_the_cache(
    double: Path,  # noqa: F811 (the fixture)
    sites: dict[str, Path],
    models: Path,  # its Hugging Face cache holds the hub models
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    data: dict[str, Any],
) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    recipe = write_recipe(folder, data)
    if recipe is None or len(build_plan(recipe).graphs) > 40:
        reject()
    assert recipe is not None
    site = str(sites[release_of(data)])  # the double installed as the recipe's release
    monkeypatch.syspath_prepend(site)
    setenv(monkeypatch, "PYTHONPATH", site)
    double.unlink(missing_ok=True)
    store = Store(str(folder / "store"), create=True)
    report = compile_recipe(
        recipe, store, stream=io.StringIO(), jobs=3, timeout=60.0, log_dir=folder / "logs"
    )
    assert report.failed == 0 and report.manifest is not None, report.units
    planned = sorted(map(words, build_plan(recipe).graphs))
    assert sorted(compiled_graphs(double)) == planned
    run = serve_and_count(recipe, store, folder / "serve", monkeypatch)
    assert run.returncode == 0, run.stderr
    assert f"{len(planned)} graphs loaded" in run.stdout


CHANGES: dict[str, Any] = {
    "optimization_level": st.sampled_from([0, 1, 2, 3]),
    "block_size": st.sampled_from([16, 32, 64]),
    "tensor_parallel_size": st.sampled_from([1, 2, 4, 8]),
    "dtype": st.sampled_from(["bfloat16", "float16"]),
    "max_num_seqs": st.integers(1, 16),
}
"""Engine arguments a user changes between two builds of one recipe, and their values."""


def double_keys(
    platform: ModuleType, server: ModuleType, recipe: Recipe, mp: pytest.MonkeyPatch
) -> set[str]:
    """The vLLM-Neuron cache keys (``create_cache_hash``, as the double computes them) of every
    graph the double extracts for ``recipe``, started as compile starts it."""
    resolved = resolve(platform, server, get_engine("neuron").start_args(recipe), mp)
    phases = platform.plan(resolved, honour_skips=False)
    return {platform.cache_key(g, resolved, "trn2") for graphs in phases.values() for g in graphs}


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(data=recipes(), change=st.sampled_from(sorted(CHANGES)), value=st.data())
@pytest.mark.slow
def test_a_change_that_changes_a_compiled_graph_changes_a_unit_key(
    models: Path,
    the_double: tuple[ModuleType, ModuleType],
    sites: dict[str, Path],
    data: dict[str, Any],
    change: str,
    value: st.DataObject,
) -> None:
    """Issue 42 item 5, keys: for a recipe and the same recipe with one argument changed, both
    valid, a graph vLLM-Neuron keys otherwise (so it would not hit the other's entry) lies in a
    unit whose key differs; otherwise a unit of one build would be served to the other."""
    platform, server = the_double
    other = {**data, change: value.draw(CHANGES[change])}
    if data["target"] != "trn2" or other == data:
        reject()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(models)
        mp.syspath_prepend(str(sites[release_of(data)]))
        try:
            recipes_ = [parse_recipe(d, source=str(models / "r.yaml")) for d in (data, other)]
            keys = [double_keys(platform, server, r, mp) for r in recipes_]
        except (RecipeInvalid, ValueError, KeyError, TypeError):
            reject()
    units = [{u.key.digest for u in build_plan(r).units} for r in recipes_]
    if keys[0] != keys[1]:
        assert units[0] != units[1], (change, data)
    event(f"{change}: {'double keys differ' if keys[0] != keys[1] else 'double keys equal'}")
