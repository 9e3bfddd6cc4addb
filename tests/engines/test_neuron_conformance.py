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
from neuronbuild.build.compile import compile_recipe
from neuronbuild.engines.neuron import PHASE_OF_KIND
from neuronbuild.engines.vllm_args import vllm_cli_args
from neuronbuild.errors import RecipeInvalid
from neuronbuild.graph import Graph
from neuronbuild.plan import build_plan
from neuronbuild.recipe import Recipe, load_recipe, parse_recipe
from neuronbuild.store.cas import Store
from tests.conftest import neuron_recipe
from tests.engines.test_neuron_engine import compiled_graphs, double  # noqa: F401 (fixture)
from tests.engines.test_neuron_phases import QWEN3_VL_CONFIG, serve_and_count
from tests.neuron_double import SITE

MODELS = {
    "text": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "pooling": {"architectures": ["Qwen3ForSequenceClassification"], "model_type": "qwen3"},
    "vl": QWEN3_VL_CONFIG,
}
"""The local model folders generated recipes run on: ``./<name>/config.json``."""

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
        mnbt = draw(st.sampled_from([mml, 2 * mml]))
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


@st.composite
def recipes(draw: st.DrawFn) -> dict[str, Any]:
    """A neuron recipe's data on one of :data:`MODELS` (relative paths: run from their folder)."""
    mml = draw(st.sampled_from([512, 1024, 2048, 4096, 8192]))
    nc, top = draw(neuron_config(mml))
    model = draw(st.sampled_from(["vl", "text", "vl", "pooling"]))
    args: dict[str, Any] = {
        "model": f"./{model}",
        "max_model_len": mml,
        "tensor_parallel_size": draw(st.sampled_from([1, 2, 4, 8])),
        "enable_prefix_caching": False,
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
    additional: dict[str, Any] = {"neuron_config": nc}
    if model == "vl":
        vnc, vision_args = draw(vision(mml))
        if vision_args.pop("_lm_only"):
            additional["mm_language_model_only"] = True
        args.update(vision_args)
        if vnc is not None:
            additional["vision_neuron_config"] = vnc
    args["additional_config"] = additional
    return neuron_recipe(**args)


@pytest.fixture(scope="module")
def models() -> Iterator[Path]:
    """A folder holding every model of :data:`MODELS` and a recipe file to name as the source."""
    root = Path(tempfile.mkdtemp(prefix="nb-conformance-"))
    for name, config in MODELS.items():
        (root / name).mkdir()
        (root / name / "config.json").write_text(json.dumps(config))
    (root / "r.yaml").write_text("")
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


def resolve(
    platform: ModuleType, server: ModuleType, args: dict[str, Any], mp: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The double's configuration of ``args``, reached as the compile worker and serve reach
    it: the API server's command line, parsed by the server, resolved by the platform."""
    argv = vllm_cli_args(args)
    mp.setattr(sys, "argv", ["api_server", *argv])
    resolved: dict[str, Any] = platform.resolve_config(server.parse(argv))
    return resolved


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(data=recipes())
def test_the_plan_equals_what_the_double_extracts_graph_for_graph(
    models: Path, the_double: tuple[ModuleType, ModuleType], data: dict[str, Any]
) -> None:
    platform, server = the_double
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(models)
        refusals: list[str] = []
        try:
            recipe = parse_recipe(data, source=str(models / "r.yaml"))
        except RecipeInvalid as exc:
            recipe, refusals = None, [str(e) for e in exc.errors]
        try:
            args = {k: v for k, v in data.items() if k not in ("name", "target", "toolchain")}
            resolved = resolve(platform, server, recipe.engine_args if recipe else args, mp)
            everything = extracted(platform, resolved, set(), mp)
        except (ValueError, KeyError, TypeError):
            # The plugin refuses it at start: neuronbuild must refuse it before compiling.
            assert recipe is None, data
            event("refused by both")
            reject()
        if recipe is None:
            # "Builds no graph" is a claim about the plugin: the double must extract none.
            if any("builds no graph" in r for r in refusals):
                assert everything == Counter(), data
            event("refused by neuronbuild only")
            reject()  # neuronbuild is stricter than the double (row E9 covers the rest)
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
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    data: dict[str, Any],
) -> None:
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    recipe = write_recipe(folder, data)
    if recipe is None or len(build_plan(recipe).graphs) > 40:
        reject()
    assert recipe is not None
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
