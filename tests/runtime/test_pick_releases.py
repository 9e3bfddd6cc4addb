"""One ref across an SDK upgrade (issue 44): the Neuron double installed as 2.32 (vLLM Neuron 0.24)
and as 2.34 (0.29 GA) stands for two CI hosts and two nodes. CI of each release adds its build to
the index ``t/latest`` names; a 2.32 node and a 2.34 node each pick their own build and say so; a
2.33.1 node, which neither build fits, gets the table of both and exit 2. What a node has
installed is what the wheels on its path report (``importlib.metadata``), as on a real node."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.engines import versions
from neuronbuild.engines.neuron.node import NODE_TARGET_OVERRIDE
from neuronbuild.store.cas import Store
from tests.conftest import NEURON_TOOLCHAIN, neuron_recipe
from tests.lib.builders import publish_units
from tests.lib.commands import neuronbuild as nb
from tests.neuron_double import INSTALLS, SITE, install

PINS = {"2.32.0": NEURON_TOOLCHAIN, **INSTALLS}


class Fleet:
    """Hosts and nodes of several Neuron releases in this process: :meth:`on` makes the wheels
    of one release the installed ones (first on ``sys.path``)."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.tmp_path, self.monkeypatch = tmp_path, monkeypatch
        self.sites = {"2.32.0": SITE}
        monkeypatch.setenv(NODE_TARGET_OVERRIDE, "trn2")

    def on(self, release: str) -> None:
        if release not in self.sites:
            self.sites[release] = install(release, self.tmp_path)
        self.monkeypatch.syspath_prepend(str(self.sites[release]))
        importlib.invalidate_caches()
        versions.record_digest.cache_clear()

    def recipe(self, release: str) -> tuple[str, dict[str, Any]]:
        (self.tmp_path / "model").mkdir(exist_ok=True)
        (self.tmp_path / "model" / "config.json").write_text("{}")
        data = neuron_recipe(toolchain=dict(PINS[release]), model="./model")
        path = self.tmp_path / f"t-{release}.yaml"
        path.write_text(yaml.safe_dump(data))
        return str(path), data


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    monkeypatch.chdir(tmp_path)
    return Fleet(tmp_path, monkeypatch)


def built_on(fleet: Fleet, store: Store, release: str) -> tuple[str, str]:
    """CI on a host of ``release``: its build published (units and manifest); returns the
    recipe file and the manifest digest."""
    fleet.on(release)
    source, data = fleet.recipe(release)
    return source, publish_units(store, data, fleet.tmp_path, release)


def test_a_node_of_each_release_picks_its_build_of_one_ref_and_another_gets_the_table(
    fleet: Fleet,
) -> None:
    store = Store(str(fleet.tmp_path / "store"), create=True)
    _, old = built_on(fleet, store, "2.32.0")
    new_recipe, new = built_on(fleet, store, "2.34.0")
    store.set_ref("t", "latest", old)  # the fleet serves 2.32's build; 2.34's is built ahead
    done = nb("seal", new_recipe, "--cache", store.url, "--index")
    assert done.returncode == 0, done.stderr
    index = store.get_ref("t", "latest")
    assert index is not None and store.get_index(index).manifests() == sorted([old, new])
    for release, build in (("2.32.0", old), ("2.34.0", new)):
        fleet.on(release)
        served = nb("serve", "--ref", "t/latest", "--cache", store.url, "--dry-run", "--json")
        assert served.returncode == 0, served.stderr
        assert json.loads(served.stdout)["manifest"] == build
        pins = PINS[release]
        assert f"serving {build}, built for trn2, " in served.stderr
        assert f"vllm-neuron {pins['vllm-neuron']}" in served.stderr
    fleet.on("2.33.1")
    refused = nb("serve", "--ref", "t/latest", "--cache", store.url, "--dry-run")
    assert refused.returncode == 2
    rows = [line for line in refused.stderr.splitlines() if "incompatible" in line]
    assert len(rows) == 2
    for release in ("2.32.0", "2.34.0"):
        want = PINS[release]["vllm-neuron"]
        here = INSTALLS["2.33.1"]["vllm-neuron"]
        assert any(f"vllm-neuron {want} (this node: {here})" in row for row in rows)
