"""``compile --stage DIR``: CI reads through the shared store (``--cache``) and writes only the
stage folder; ``push --from DIR`` publishes a stage whose blobs the destination already holds
(issue 20, "Fresh runners recompile everything"). On S3 the HTTP requests are counted: no blob
of a unit the store holds is fetched (GET) by the compile, nor copied by the push."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from tests.lib.s3 import moto_s3, s3_requests
from tests.orchestrate.test_shards import (
    builds,
    double_env,
    double_recipe,
    neuronbuild,
    write_recipes,
)


def blob_files(folder: Path) -> list[Path]:
    return [p for p in (folder / "blobs").rglob("*") if p.is_file()] if folder.exists() else []


@pytest.mark.slow
def test_a_fresh_stage_reads_the_shared_store_and_fetches_no_blob(tmp_path: Path) -> None:
    env = double_env(tmp_path)
    (path,) = write_recipes(tmp_path, [double_recipe("app")])
    shared = tmp_path / "shared"
    first = tmp_path / "run1" / "stage"
    done = neuronbuild("compile", path, "--cache", str(shared), "--stage", str(first), env=env)
    assert done.returncode == 0, done.stderr
    assert not shared.exists()  # the build only read the shared store
    pushed = neuronbuild(
        "push", "app/latest", "--from", str(first), "--cache", str(shared), env=env
    )
    assert pushed.returncode == 0, pushed.stderr
    assert sum(builds(tmp_path).values()) == 1

    fresh = tmp_path / "run2" / "stage"  # a second fresh runner: empty job folder
    dry = neuronbuild(
        "compile", path, "--cache", str(shared), "--stage", str(fresh), "--dry-run", env=env
    )
    assert dry.returncode == 0, dry.stderr
    assert "1 cached" in dry.stdout and "missing" not in dry.stdout
    again = neuronbuild("compile", path, "--cache", str(shared), "--stage", str(fresh), env=env)
    assert again.returncode == 0, again.stderr
    assert "1 cached" in again.stdout
    assert sum(builds(tmp_path).values()) == 1  # compiled nothing
    assert blob_files(fresh) == []  # fetched no blob of the reused unit
    stage = Store(str(fresh))
    assert stage.get_ref("app", "latest") == Store(str(shared)).get_ref("app", "latest")

    noop = neuronbuild("push", "app/latest", "--from", str(fresh), "--cache", str(shared), env=env)
    assert noop.returncode == 0, noop.stderr
    assert "0 blobs copied" in noop.stdout


@pytest.fixture
def s3_env() -> Iterator[dict[str, str]]:
    with moto_s3("stage") as env:
        yield env


def blob_gets(requests: list[tuple[str, str]]) -> list[str]:
    return [path for method, path in requests if method == "GET" and "/blobs/" in path]


@pytest.mark.slow
def test_a_fresh_stage_on_s3_gets_no_blob_of_a_unit_the_store_holds_and_pushes_none(
    tmp_path: Path, s3_env: dict[str, str]
) -> None:
    env = double_env(tmp_path, **s3_env)
    (path,) = write_recipes(tmp_path, [double_recipe("app")])
    shared = "s3://stage/store"
    first = neuronbuild("compile", path, "--cache", shared, env=env)  # what an earlier CI pushed
    assert first.returncode == 0, first.stderr
    with s3_requests() as requests:
        stage = tmp_path / "stage"
        again = neuronbuild("compile", path, "--cache", shared, "--stage", str(stage), env=env)
        assert again.returncode == 0, again.stderr
        assert "1 cached" in again.stdout
        assert blob_gets(requests) == []
        pushed = neuronbuild("push", "app/latest", "--from", str(stage), "--cache", shared, env=env)
        assert pushed.returncode == 0, pushed.stderr
        assert "0 blobs copied" in pushed.stdout
        assert blob_gets(requests) == []
        assert not [p for m, p in requests if m == "PUT" and "/blobs/" in p]
        tier = str(tmp_path / "tier")
        pulled = neuronbuild(
            "pull", "app/latest", "--cache", shared, "--local-cache", tier, env=env
        )
        assert pulled.returncode == 0, pulled.stderr
        got = blob_files(Path(tier))
        assert got and len(blob_gets(requests)) == len(got)  # the count sees a blob GET
    assert sum(builds(tmp_path).values()) == 1


@pytest.mark.slow
def test_push_of_a_stage_to_a_store_lacking_its_blobs_is_one_line_exit_2(tmp_path: Path) -> None:
    env = double_env(tmp_path)
    (path,) = write_recipes(tmp_path, [double_recipe("app")])
    shared, other = tmp_path / "shared", tmp_path / "other"
    assert neuronbuild("compile", path, "--cache", str(shared), env=env).returncode == 0
    stage = tmp_path / "stage"
    done = neuronbuild("compile", path, "--cache", str(shared), "--stage", str(stage), env=env)
    assert done.returncode == 0, done.stderr
    pushed = neuronbuild("push", "app/latest", "--from", str(stage), "--cache", str(other), env=env)
    assert pushed.returncode == 2
    assert len(pushed.stderr.strip().splitlines()) == 1
    assert "neither it nor" in pushed.stderr
    assert Store(str(other), missing_ok=True).get_ref("app", "latest") is None


def test_stage_refuses_shard_and_local_cache_in_one_line(tmp_path: Path) -> None:
    env = double_env(tmp_path)
    (path,) = write_recipes(tmp_path, [double_recipe("app")])
    for extra in (["--shard", "0/2"], ["--local-cache", str(tmp_path / "local")]):
        done = neuronbuild(
            "compile",
            path,
            "--cache",
            str(tmp_path / "s"),
            "--stage",
            str(tmp_path / "d"),
            *extra,
            env=env,
        )
        assert done.returncode == 2
        assert done.stderr.strip().splitlines()[-1].startswith("error: --stage: not with")
