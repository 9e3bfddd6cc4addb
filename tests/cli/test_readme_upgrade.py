"""The README's SDK upgrade ("One ref for a mixed fleet", issue 44) runs as written, with the Neuron
test double standing for each release: a ``console`` block preceded by
``<!-- readme-test: Neuron X -->`` runs on a host or node where the double is installed as Neuron
release X (``tests/neuron_double.install``, first on ``PYTHONPATH``). One bash process runs every
step in a fresh folder and an empty home whose Hugging Face cache holds the model's config (what
a real host fetched before), each command checked to exit 0 or the status its comment states.
The store it leaves is then read: one ref, an index of both releases' builds while nodes
upgrade, and the 2.34 build alone at the end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from tests.cli.test_readme import (
    EXPECTED_EXIT,
    FILE_MARKER,
    README,
    Step,
    clean_env,
    console_commands,
    fenced_blocks,
    run_walkthrough,
    section,
)
from tests.lib.hub import cache_config
from tests.neuron_double import SITE, install

TITLE = "## One ref for a mixed fleet"
RELEASE = re.compile(r"<!-- readme-test: Neuron (\S+) -->")
MODEL = "meta-llama/Llama-3.3-70B-Instruct"
CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "hidden_size": 8192,
    "num_hidden_layers": 80,
    "max_position_embeddings": 131072,
}
"""What the plan and the double read of the model's config.json."""


def upgrade_steps(text: str, sites: dict[str, Path]) -> list[Step]:
    """The section's files and commands, in order, each console block's commands after an
    ``export PYTHONPATH=`` of the release its marker names (``sites``: release -> the double
    installed as it)."""
    steps = []
    for language, body, markers in fenced_blocks(section(text, TITLE)):
        files = [m.group(1) for m in map(FILE_MARKER.fullmatch, markers) if m]
        releases = [m.group(1) for m in map(RELEASE.fullmatch, markers) if m]
        if files:
            steps.append(Step(command=body, file=files[0]))
        elif language == "console":
            assert releases, f"a console block without a release marker: {body[:60]}"
            steps.append(Step(command=f"export PYTHONPATH={sites[releases[0]]}"))
            for command in console_commands(body):
                expected = EXPECTED_EXIT.search(command)
                steps.append(Step(command, int(expected.group(1)) if expected else 0))
    return steps


def test_the_upgrade_walkthrough_names_every_release_it_runs() -> None:
    text = section(README.read_text(), TITLE)
    assert set(RELEASE.findall(text)) == {"2.32.0", "2.33.1", "2.34.0"}
    steps = upgrade_steps(README.read_text(), {r: Path(r) for r in ("2.32.0", "2.33.1", "2.34.0")})
    commands = [s.command for s in steps if s.file is None and not s.command.startswith("export")]
    assert sum("--index" in c for c in commands) == 1 and sum("--diff" in c for c in commands) == 1
    assert [s.exit for s in steps if s.exit] == [2]  # the 2.33.1 node


@pytest.mark.slow
def test_the_readme_sdk_upgrade_runs_and_one_ref_serves_every_node(tmp_path: Path) -> None:
    sites = {"2.32.0": SITE, **{r: install(r, tmp_path) for r in ("2.33.1", "2.34.0")}}
    home, folder = tmp_path / "home", tmp_path / "fresh"
    folder.mkdir()
    cache_config(home / ".cache" / "huggingface" / "hub", MODEL, CONFIG, "0" * 40)
    env = clean_env(home, NEURONBUILD_NODE_TARGET="trn2", NEURONBUILD_NEURON_COMPILE_GIB="0.5")
    run_walkthrough(upgrade_steps(README.read_text(), sites), folder, env, timeout=300)
    log = (tmp_path / "walkthrough.log").read_text()
    store = Store(str(folder / "fleet-store"))
    moves = store.ref_history("llama", "latest")
    old, index, new = (m.manifest for m in moves)
    assert store.get_index(index).manifests() == sorted([old, new])
    assert store.get_ref("llama", "latest") == new
    for build, release in ((old, "2.32.0"), (new, "2.34.0")):
        assert f"serving {build}, built for trn2, Neuron {release}," in log
    assert log.count("incompatible") == 2 and "none of which this node can serve" in log
    assert "10 graphs compile (2 units)" in log  # plan --diff: every graph, from recorded times
