"""Everything ``neuronbuild serve`` and ``neuronbuild pull`` import, by both entry points, is on an
allow-list (DESIGN.md, "Repository layout": the runtime imports the store, manifest and env
modules and the engines' serve half, never the scheduler or an engine's compile path). A new
import, of our code or of a third-party package, fails here until it is reviewed and listed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from tests.conftest import cpu_recipe
from tests.lib.builders import model_folder, publish_units

OURS = {
    "neuronbuild",
    "neuronbuild.attest",  # the attestation wing's face: it imports nothing
    "neuronbuild.attest.trust",  # which policy file, if any; a policy's checks load only with one
    "neuronbuild.data",  # the checked-in list of vLLM engine arguments
    "neuronbuild.data.vllm_data",  # checked-in tables of the pinned vLLM (arguments, variables)
    "neuronbuild.digest",
    "neuronbuild.engines",
    "neuronbuild.engines.arg_classes",
    "neuronbuild.engines.arg_sources",  # which vLLM's tables judge a recipe's arguments
    "neuronbuild.engines.base",
    "neuronbuild.engines.vllm_cpu",  # the CPU engine's face: it imports nothing
    "neuronbuild.engines.vllm_cpu.engine",
    "neuronbuild.engines.coverage",
    "neuronbuild.engines.vllm_cpu.isa",
    "neuronbuild.engines.env_classes",
    "neuronbuild.engines.model_limits",  # the recipe check of max_model_len (serve validates it)
    "neuronbuild.engines.neuron",  # the Neuron engine's face: it imports nothing
    "neuronbuild.engines.neuron.engine",
    "neuronbuild.engines.neuron.buckets",
    "neuronbuild.engines.neuron.coverage",
    "neuronbuild.engines.neuron.env",
    "neuronbuild.engines.neuron.nki",
    "neuronbuild.engines.neuron.node",
    "neuronbuild.engines.neuron.releases",  # the SDK release table (its install hint at serve)
    "neuronbuild.engines.versions",  # pins against installed builds, for the node check
    "neuronbuild.engines.registry",  # engines by name, imported when first asked for
    "neuronbuild.engines.neuron.model",  # what the plan reads of a local model's config.json
    "neuronbuild.engines.neuron.vision",  # the vision plan's rules
    "neuronbuild.engines.vllm_args",  # a recipe as vLLM's command line (compile and serve alike)
    "neuronbuild.envs",
    "neuronbuild.errors",
    "neuronbuild.folders",  # the store's dry-run write probe
    "neuronbuild.graph",
    "neuronbuild.human",  # sizes, times and plurals of human output
    "neuronbuild.keys",
    "neuronbuild.model_files",
    "neuronbuild.node",  # the node wing's face: it imports nothing
    "neuronbuild.notices",  # retry notices from the store, printed by ui.progress
    "neuronbuild.orchestrate",  # the build wing's face: it imports nothing
    "neuronbuild.orchestrate.events",  # the observer's words ui.progress prints (no imports)
    "neuronbuild.paths",  # a path a manifest names, kept inside the folder laid out
    "neuronbuild.plan",
    "neuronbuild.recipe",
    "neuronbuild.schemas",  # the --json shapes' names (their files are read by tests only)
    "neuronbuild.start_env",
    "neuronbuild.store",
    "neuronbuild.transports",  # the transports' face: it imports nothing
    "neuronbuild.transports.backends",
    "neuronbuild.store.cas",
    "neuronbuild.store.index",  # a ref may name an index of builds; the node picks its own
    "neuronbuild.store.layout",
    "neuronbuild.store.moves",  # pull's line of a ref move (a mirror: never refused)
    "neuronbuild.store.names",  # refs, bare names and digest prefixes
    "neuronbuild.node.materialize",
    "neuronbuild.node.additions",  # what nodes gave back to a build, laid out beside it
    "neuronbuild.store.additions",  # an addition read as store data (gc, copies, serve)
    "neuronbuild.node.image_stamp",  # a node image's stamp, checked on its read-only mount
    "neuronbuild.node.mirrors",  # the mirrors vLLM is given over a node image
    "neuronbuild.node.weights",  # the model's weight files checked against the build's
    "neuronbuild.node.host_records",  # this host's records of what it hashed (images, weights)
    "neuronbuild.store.oci",  # oci:// stores (imported when the URL is one)
    "neuronbuild.transports.oci_registry",  # oci:// URLs told apart; the registry's requests
    "neuronbuild.transports.ranged",  # large S3 blobs read as concurrent ranged GETs
    "neuronbuild.store.records",
    "neuronbuild.transports.schemes",  # the scheme table: the one door to a backend
    "neuronbuild.user_files",  # the one bounded reader of user and store files
    "neuronbuild.transports.retry",
    "neuronbuild.transports.s3_fast",  # S3 blobs' bytes through obstore
    "neuronbuild.store.tiered",
    "neuronbuild.store.transfer",
    "neuronbuild.ui",
    "neuronbuild.ui.console",
    "neuronbuild.ui.env_help",  # serve --help's environment section (engines imported on --help)
    "neuronbuild.ui.formatting",  # whether human output is coloured
    "neuronbuild.ui.logtail",  # the last lines of a log (progress's heartbeat reads one)
    "neuronbuild.ui.options",  # the options commands share
    "neuronbuild.ui.progress",  # byte progress of serve's fetch and of pull (tqdm)
    "neuronbuild.ui.redact",  # credentials cut from what the CLI prints (URL userinfo, queries)
    "neuronbuild.ui.streams",  # the CLI edge watching stdout and stderr (a closed pipe: 141)
    "neuronbuild.ui.verbosity",  # -v/-q
    "neuronbuild_runtime",
    "neuronbuild_runtime.cli",
    "neuronbuild_runtime.node_checks",
    "neuronbuild_runtime.pick",  # which build of an index this node serves, and why
    "neuronbuild_runtime.node_config",  # the node's own settings: folders it writes, the address
    "neuronbuild_runtime.serve",
    "neuronbuild_runtime.serve_checks",  # its checks before the first fetch, in order
    "neuronbuild_runtime.serve_options",
}
"""Our modules a node may load (the CLI group module only through ``neuronbuild serve``)."""

ENTRY_ONLY = {
    "neuronbuild.cli",
    "neuronbuild.cli.attest",  # sign; it imports the signature libraries when it runs
    "neuronbuild.cli.build",  # the build commands; they import the compile side when they run
    "neuronbuild.cli.common",
    "neuronbuild.cli.conformance",  # the kit; it imports its checks when it runs
    "neuronbuild.cli.diagnose",
    "neuronbuild.cli.image",  # image; it imports the image wing and ORAS when it runs
    "neuronbuild.cli.main",  # the command group
    "neuronbuild.cli.store",
    "neuronbuild.__main__",
    "neuronbuild_runtime.__main__",
}
"""The command-line entry modules themselves (the group's command modules included)."""

THIRD_PARTY = {
    "click",
    "filelock",
    "fsspec",
    "packaging",  # PEP 440 versions (engines.versions)
    "pydantic",
    "pydantic_core",
    "tqdm",
    "yaml",
    "annotated_types",
    "typing_extensions",
    "typing_inspection",
    "cython_runtime",  # loaded by pyyaml's C extension
}
"""Third-party top-level packages a node may load before exec'ing vLLM (no torch, no vLLM)."""

RUN = """
import atexit, json, os, runpy, sys
def dump():
    names = sorted(sys.modules)
    with open({out!r}, "w") as f:
        json.dump(names, f)
def execve(path, argv, env):
    dump()
    os._exit(0)
os.execve = execve
atexit.register(dump)
sys.argv = [{module!r}, *{args!r}]
runpy.run_module({module!r}, run_name="__main__", alter_sys=True)
"""


def loaded(module: str, args: list[str], tmp_path: Path, name: str) -> set[str]:
    out = tmp_path / f"{name}.json"
    script = RUN.format(out=str(out), module=module, args=args)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(out.read_text()))


def stdlib_or_allowed(name: str) -> bool:
    top = name.split(".")[0]
    return (
        top in sys.stdlib_module_names
        or top in THIRD_PARTY
        or top.startswith("_")
        or name in OURS
        or name in ENTRY_ONLY
    )


@pytest.mark.parametrize(
    ("module", "command"),
    [
        ("neuronbuild", "serve"),
        ("neuronbuild_runtime", "serve"),
        ("neuronbuild", "pull"),
    ],
)
def test_serve_and_pull_import_only_the_allow_list(
    module: str, command: str, tmp_path: Path
) -> None:
    model = model_folder(tmp_path)
    store = Store(str(tmp_path / "store"), create=True)
    digest = publish_units(store, cpu_recipe(cpu_isa="host", model=str(model)), tmp_path, "a")
    args = {
        "serve": ["--manifest", digest, "--cache", store.url, "--vllm-cache-root", "root"],
        "pull": [digest, "--cache", store.url, "--local-cache", str(tmp_path / "node")],
    }[command]
    if module == "neuronbuild":
        args = [command, *args]
    names = loaded(module, args, tmp_path, f"{module}-{command}")
    assert "neuronbuild.store.tiered" in names  # it really ran
    outside = sorted(n for n in names if not stdlib_or_allowed(n))
    assert outside == [], outside
