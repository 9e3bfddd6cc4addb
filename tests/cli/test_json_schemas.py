"""Every ``--json`` document a command prints, on success and on failure, is one JSON value on
stdout that validates against the schema its ``schema`` field names, shipped in
``neuronbuild/schemas/`` (docs/json.md); and every command that has ``--json`` has a schema and
cases here, so a new one cannot be added without them."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import click
import jsonschema
import pytest

from neuronbuild import schemas
from neuronbuild.cli.main import all_commands, cli
from neuronbuild.store.cas import Store
from neuronbuild.ui.console import run
from tests.conftest import NKI_INTERMEDIATE_VARS
from tests.engines.test_neuron_engine import small_recipe
from tests.engines.test_neuron_releases import release_recipe
from tests.lib.keys import write_key
from tests.lib.openai_double import openai_double
from tests.lib.registry import registry
from tests.neuron_double import SITE, install
from tests.orchestrate.test_shards import double_env, double_recipe, write_recipes


@dataclass(frozen=True)
class Case:
    """``neuronbuild ARGS --json`` expected to print a ``shape`` document and exit ``code``;
    ``process``: run in a process of its own (a compile whose engine worker must find the test
    double), else in this one through the same entry point (``console.run``), which is faster."""

    command: str
    args: tuple[str, ...]
    shape: str
    code: int = 0
    process: bool = False
    neuron: bool = False
    node: bool = False


def case(
    command: str,
    *args: str,
    shape: str | None = None,
    code: int = 0,
    process: bool = False,
    neuron: bool = False,
    node: bool = False,
) -> Case:
    """``neuron``: run in a process of its own with the neuron test double installed; ``node``:
    installed as Neuron 2.33.1, on a trn2 node."""
    return Case(command, args, shape or command, code, process or neuron or node, neuron, node)


ERROR = schemas.ERROR
PROBED = ("--vllm-cache-root", "{root}/probed")
"""Where the ``serve --layout-only`` case lays ``a`` out, for the ``probe`` cases after it."""
# {store}: a folder store holding a/latest (recipe {a}); {bad}: a recipe whose unit fails to
# compile; {root}: the folder of both; {nowhere}: a store folder that does not exist.
CASES = [
    case("validate", "{a}"),
    case("validate", "{a}", "{bad_yaml}", code=2),  # the report, listing the invalid one
    case("validate", shape=ERROR, code=2),  # a usage error: no RECIPE
    case("plan", "{a}"),
    case("plan", "{a}", "--cache", "{store}"),
    case("plan", "{bad}", "--diff", "{a}", "--cache", "{store}"),
    case("plan", "{root}/nope.yaml", shape=ERROR, code=2),
    case("compile", "{a}", "--cache", "{store}"),
    case("compile", "{a}", "{bad}", "--cache", "{store}", "--dry-run"),
    case("compile", "{a}", "{bad}", "--cache", "{store}", "--shard", "0/2", "--dry-run"),
    case("compile", "{bad}", "--cache", "{store}", code=1, process=True),  # reports the failure
    case("compile", "{a}", "--cache", "{store}", "--shards", "2", shape=ERROR, code=2),
    case("seal", "{a}", "--cache", "{store}", "--tag", "sealed"),
    case("seal", "{a}", "{bad}", "--cache", "{store}", "--shards", "2", code=1),
    case("seal", "{a}", "--cache", "{nowhere}", shape=ERROR, code=3),
    case("seal", "{a}", "--cache", "{store}", "--tag", "signed", "--sign", "{key}"),
    case("sign", "a", "--key", "{key}", "--cache", "{store}"),
    case("sign", "a", "--key", "{root}/no.key", "--cache", "{store}", shape=ERROR, code=2),
    case("verify", "a", "--cache", "{store}", "--deep"),
    case("verify", "{short}", "--cache", "{store}"),
    case("verify", "nope/latest", "--cache", "{store}", shape=ERROR, code=2),
    case("push", "a", "--from", "{store}", "--cache", "{root}/pushed"),
    case(
        "push", "sha256:00000000", "--from", "{store}", "--cache", "{root}/x", shape=ERROR, code=2
    ),
    case("pull", "{short}", "--cache", "{store}", "--local-cache", "{root}/pulled"),
    case(
        "pull", "sha256:0", "--cache", "{store}", "--local-cache", "{root}/y", shape=ERROR, code=2
    ),
    case("tag", "a", "a/prod", "--cache", "{store}"),
    case("tag", "a", "a/no tag", "--cache", "{store}", shape=ERROR, code=2),
    case("ls", "--cache", "{store}"),
    case("ls", "--history", "--cache", "{store}"),
    case("ls", "--cache", "{nowhere}", shape=ERROR, code=3),
    case("gc", "--dry-run", "--older-than", "0", "--cache", "{store}"),
    case("gc", "--cache", "{nowhere}", shape=ERROR, code=3),
    case("doctor", "{a}", "--cache", "{store}"),
    case("doctor", "{bad}", "--cache", "{store}"),
    case("doctor", "{root}/nope.yaml", "--cache", "{store}", shape=ERROR, code=2),
    case("status", "--cache", "{store}"),
    case("status", "{bad}", "--cache", "{store}"),
    case("status", "--cache", "{nowhere}", shape=ERROR, code=3),
    case("serve", "--ref", "a", "--cache", "{store}", "--workdir", "{root}", "--dry-run"),
    case(
        "serve", "--manifest", "{short}", "--cache", "{store}", "--dry-run", "--workdir", "{root}"
    ),
    case("serve", "--manifest", "sha256:f", "--cache", "{store}", "--dry-run", shape=ERROR, code=2),
    case(
        "serve", "--ref", "a", "--cache", "{store}", "--workdir", "{root}", "--layout-only", *PROBED
    ),
    case("probe", "--ref", "a", "--cache", "{store}", "--url", "{openai}", "--record", *PROBED),
    case("probe", "--ref", "a", "--cache", "{store}", "--url", "{openai}", *PROBED),
    case(
        "probe",
        "--ref",
        "a",
        "--cache",
        "{store}",
        "--url",
        "http://127.0.0.1:9",
        *PROBED,
        shape=ERROR,
        code=2,
    ),
    case("capture", "{n33}", "--cache", "{store}", "--timeout", "60", node=True),
    case("capture", "--ref", "a", "--cache", "{store}", shape=ERROR, code=2),  # nothing to give
    case("conformance", "{n}", "--cache", "{store}", neuron=True),  # neuron recipe {n}'s build
    case("conformance", "{a}", "--cache", "{store}", shape=ERROR, code=2),  # not a neuron recipe
    case("image", "a", "--cache", "{store}", "--to", "oci+http://{registry}/json/a:v1"),
    case("image", "a", "--cache", "{store}", "--to", "http://{registry}/a", shape=ERROR, code=2),
    case("isa"),
    case("isa", "{a}", shape=ERROR, code=2),  # a usage error: isa takes no argument
]
"""Each command with --json: at least one success and one failure (exits 1 and 2 print the
command's own report where it has one, others print ``neuronbuild.error/1``)."""


@dataclass(frozen=True)
class Ran:
    case: Case
    code: int
    stdout: str
    stderr: str


def neuron_env(root: Path, site: Path = SITE) -> dict[str, str]:
    """The environment of a process that finds the neuron test double installed in ``site``
    (and no real /var/tmp)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["NEURONBUILD_NEURON_COMPILE_GIB"] = "0.5"
    env["XDG_CACHE_HOME"] = str(root / "xdg")
    for name in NKI_INTERMEDIATE_VARS:
        env[name] = str(root / "nki-intermediate")
    return env


def node_env(root: Path) -> dict[str, str]:
    """:func:`neuron_env` of the double installed as Neuron 2.33.1 (under ``root``), on a trn2
    node."""
    site = root / "site-2.33.1"
    if not site.exists():
        install("2.33.1", root)
    env = neuron_env(root, site)
    return {**env, "NEURONBUILD_NODE_TARGET": "trn2", "NEURON_DOUBLE_DEVICE": "trn2"}


def run_case(c: Case, places: dict[str, str], env: dict[str, str]) -> Ran:
    args = [a.format(**places) for a in (c.command, *c.args)] + ["--json"]
    if c.neuron:
        env = neuron_env(Path(places["root"]))
    if c.node:
        env = node_env(Path(places["root"]))
    if c.process:
        done = subprocess.run(
            [sys.executable, "-m", "neuronbuild", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        return Ran(c, done.returncode, done.stdout, done.stderr)
    out, err = io.StringIO(), io.StringIO()
    handler = signal.getsignal(signal.SIGTERM)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            run(cli, args)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        signal.signal(signal.SIGTERM, handler)
    return Ran(c, code, out.getvalue(), err.getvalue())


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> list[Ran]:
    """Every case, run for real, in order, on a store the CPU test double built."""
    root = tmp_path_factory.mktemp("json")
    a, bad = write_recipes(
        root, [double_recipe("a", max_num_seqs=2), double_recipe("bad", max_num_seqs=8)]
    )
    env = double_env(root, CPU_DOUBLE_FAIL_SEQS="8")
    store = root / "store"
    built = subprocess.run(
        [sys.executable, "-m", "neuronbuild", "compile", a, "--cache", str(store)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert built.returncode == 0, built.stderr
    (root / "neuron").mkdir()
    neuron = small_recipe(root / "neuron").source
    done = subprocess.run(
        [sys.executable, "-m", "neuronbuild", "compile", neuron, "--cache", str(store)],
        capture_output=True,
        text=True,
        env=neuron_env(root),
    )
    assert done.returncode == 0, done.stderr
    (root / "n33").mkdir()
    n33 = release_recipe(root / "n33", "2.33.1").source
    done = subprocess.run(
        [sys.executable, "-m", "neuronbuild", "compile", n33, "--cache", str(store)],
        capture_output=True,
        text=True,
        env=node_env(root),
    )
    assert done.returncode == 0, done.stderr
    (root / "bad.yaml.txt").write_text("name: [\n")
    write_key(root / "ci.key")
    places = {
        "root": str(root),
        "a": a,
        "n": neuron,
        "n33": n33,
        "bad": bad,
        "bad_yaml": str(root / "bad.yaml.txt"),
        "store": str(store),
        "nowhere": str(root / "nowhere"),
        "key": str(root / "ci.key"),
        "short": Store(str(store)).resolve("a/latest")[:19],
    }
    with pytest.MonkeyPatch.context() as patch, registry() as oci, openai_double() as (url, _):
        patch.setenv("XDG_CACHE_HOME", env["XDG_CACHE_HOME"])  # serve's layout folder and tier
        return [run_case(c, {**places, "registry": oci.host, "openai": url}, env) for c in CASES]


def _id(c: Case) -> str:
    return " ".join([c.command, *c.args, f"-> {c.shape} exit {c.code}"])


@pytest.mark.parametrize("index", range(len(CASES)), ids=[_id(c) for c in CASES])
def test_json_output_validates_against_its_shipped_schema(ran: list[Ran], index: int) -> None:
    [result] = [r for r in ran if r.case == CASES[index]]
    assert result.code == result.case.code, result.stderr[-2000:]
    document = json.loads(result.stdout)  # exactly one JSON value on stdout
    assert document["schema"] == schemas.schema_id(result.case.shape)
    jsonschema.validate(document, schemas.load(result.case.shape))
    if result.case.shape == ERROR:
        assert document["exit_code"] == result.code
        assert all(line.split(": ", 1)[-1] in result.stderr for line in document["errors"])
        assert document["error"] and not document["error"].startswith("error")  # no label


def json_commands() -> dict[str, click.Command]:
    """Every command of ``neuronbuild`` that takes ``--json``."""
    return {
        name: command
        for name, command in all_commands().items()
        if any("--json" in p.opts for p in command.params if isinstance(p, click.Option))
    }


def test_every_command_with_json_has_a_schema_and_cases() -> None:
    commands = set(json_commands())
    assert commands, "no command has --json"
    assert set(schemas.shapes()) == commands | {ERROR}, "a schema without a command, or not"
    for name in commands:
        shapes = {(c.shape, c.code == 0) for c in CASES if c.command == name}
        assert (name, True) in shapes, f"{name}: no successful --json case"
        assert any(not ok for _, ok in shapes), f"{name}: no failing --json case"


def test_every_shipped_schema_is_a_valid_json_schema() -> None:
    for shape in schemas.shapes():
        schema = schemas.load(shape)
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["properties"]["schema"] == {"const": schemas.schema_id(shape)}


from tests.conftest import REPO  # noqa: E402


def test_docs_list_every_shape() -> None:
    text = (REPO / "docs" / "json.md").read_text()
    for shape in schemas.shapes():
        assert f"`{schemas.schema_id(shape)}`" in text, shape


def test_a_document_with_an_unknown_or_renamed_field_is_refused() -> None:
    """The schemas are closed: a field renamed in the product without its schema fails above."""
    document = {"schema": "neuronbuild.tag/1", "store": "s", "ref": "a/b", "previous": None}
    document["manifest"] = "sha256:" + "0" * 64
    jsonschema.validate(document, schemas.load("tag"))
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**document, "held": True}, schemas.load("tag"))
