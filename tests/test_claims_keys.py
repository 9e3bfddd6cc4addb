"""Unit keys hold no host paths, host names or users, for every engine and every checked-in
recipe: the same recipe, copied to another folder of another host under another user, plans the
same keys. The host name is changed in two ways: by ``unshare --uts`` where the kernel allows it,
and always inside the planning process (``socket.gethostname``, ``platform.node``),
so no check is dropped on a machine without ``unshare``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import RECIPES, can_unshare_uts

PLAN_KEYS = """
import json, os, platform, socket, sys
host = sys.argv[1]
if host:
    socket.gethostname = lambda: host
    platform.node = lambda: host
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe
out = []
for path in sorted(os.listdir("recipes")):
    plan = build_plan(load_recipe(os.path.join("recipes", path)))
    out += [[path, plan.engine.name, u.key.digest, u.key.factors] for u in plan.units]
print(json.dumps(out))
"""


def copy_project(where: Path) -> Path:
    """The checked-in recipes and the demo model folder they name, under ``where``."""
    shutil.copytree(RECIPES, where / "recipes")
    model = where / "build" / "tiny-llama"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    return where


def plan_keys(where: Path, env: dict[str, str], host: str, unshare: bool) -> list[list[object]]:
    command = [sys.executable, "-c", PLAN_KEYS, host]
    if unshare:
        command = ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$@"', "sh", *command]
    result = subprocess.run(
        command, cwd=where, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_every_engine_plans_the_same_keys_in_another_folder_host_and_user(
    tmp_path: Path,
) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON", "VLLM_"))}
    base["PYTHONPATH"] = str(RECIPES.parent)
    here = copy_project(tmp_path / "ci" / "build-1")
    there = copy_project(tmp_path / "elsewhere" / "deeper" / "node-7")
    home = tmp_path / "home-of-someone"
    home.mkdir()
    other = {
        **base,
        "USER": "someone-else",
        "LOGNAME": "someone-else",
        "HOME": str(home),
        "HOSTNAME": "build-host-2",
        "TMPDIR": str(home),
        "PWD": str(there),
    }
    mine = plan_keys(here, base, "", unshare=False)
    unshare = sys.platform.startswith("linux") and can_unshare_uts()
    theirs = plan_keys(there, other, "build-host-2", unshare=unshare)
    assert {row[1] for row in mine} == {"cpu", "neuron"}, "a recipe per engine"
    assert len(mine) == len(theirs) > 2
    assert [row[2] for row in mine] == [row[2] for row in theirs]
    # And directly: nothing host-specific spelled in any factor.
    text = json.dumps([row[3] for row in mine])
    for local in (str(tmp_path), str(here), os.environ.get("HOME", "/root"), socket.gethostname()):
        assert local not in text, local
