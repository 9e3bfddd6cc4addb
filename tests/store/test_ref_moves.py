"""Ref moves that never go back by accident (issue 20, "push can move a shared ref backwards"):
every command that moves a shared ref (``tag``, ``push``, ``compile``, ``seal``) reports the
previous value, refuses a move back to a manifest the ref pointed at before unless
``--rollback``, and takes ``--expect`` (compare-and-swap from the command line); ``pull``, a
mirror, follows a rollback. Against a folder store and moto's S3 server alike."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from neuronbuild.store.records import RefMove
from tests.lib.builders import cpu_recipe, model_folder, publish_build
from tests.lib.commands import neuronbuild_in_process as nb
from tests.lib.s3 import moto_s3
from tests.orchestrate.test_shards import double_env, double_recipe, neuronbuild, write_recipes

BUCKET = "neuronbuild-ref-moves"


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    with moto_s3(BUCKET) as env:
        yield env


@pytest.fixture(params=["folder", "s3"])
def shared(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty shared store: a folder, or a prefix of moto's S3 bucket."""
    if request.param == "folder":
        return str(tmp_path / "shared")
    request.getfixturevalue("s3_env")
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"


def job_folder(tmp_path: Path, seed: int) -> tuple[str, str]:
    """A CI job folder holding one build of ``tiny`` (``seed`` makes it another manifest) and
    ``tiny/latest`` at it: its URL and the manifest."""
    folder = tmp_path / f"job-{seed}"
    store = Store(str(folder), create=True)
    data = cpu_recipe(cpu_isa="host", seed=seed, model=str(model_folder(tmp_path)))
    return str(folder), publish_build(store, data, tmp_path, f"s{seed}")


def push(job: str, cache: str, *extra: str) -> tuple[int, str, str]:
    return nb("push", "tiny/latest", "--from", job, "--cache", cache, *extra)


@pytest.mark.slow
def test_push_of_an_old_job_folder_is_refused_then_allowed_with_rollback(
    shared: str, tmp_path: Path
) -> None:
    (old, one), (new, two) = job_folder(tmp_path, 1), job_folder(tmp_path, 2)
    code, out, err = push(old, shared)
    assert code == 0, err
    assert out.splitlines()[-1] == f"tiny/latest: (new ref) -> {one}"
    code, out, err = push(new, shared, "--json")
    assert code == 0, err
    assert json.loads(out)["previous"] == one

    code, out, err = push(old, shared)  # an old CI job re-run, or its folder pushed again
    assert code == 2
    assert err.strip() == (
        f"error: tiny/latest holds {two}; {one} is an older value of it (ls --history): "
        "nothing moved; pass --rollback to move it back"
    )
    store = Store(shared)
    assert store.get_ref("tiny", "latest") == two
    assert [m.manifest for m in store.ref_history("tiny", "latest")] == [one, two]

    code, out, err = push(old, shared, "--rollback")
    assert code == 0, err
    assert out.splitlines()[-1] == f"tiny/latest: {two} -> {one}"
    assert store.get_ref("tiny", "latest") == one
    code, out, err = push(old, shared)  # to the value it holds: a no-op, never refused
    assert code == 0, err
    assert out.splitlines()[-1] == f"tiny/latest: already at {one}; nothing moved"


@pytest.mark.slow
def test_tag_backwards_is_refused_and_every_move_names_its_previous_value(
    shared: str, tmp_path: Path
) -> None:
    (job1, one), (job2, two) = job_folder(tmp_path, 1), job_folder(tmp_path, 2)
    assert push(job1, shared)[0] == 0
    code, out, err = nb("tag", "tiny/latest", "tiny/prod", "--cache", shared)
    assert (code, out) == (0, f"tiny/prod: (new ref) -> {one}\n"), err
    assert push(job2, shared)[0] == 0
    code, out, err = nb("tag", "tiny/latest", "tiny/prod", "--cache", shared, "--json")
    assert code == 0, err
    assert json.loads(out)["previous"] == one

    code, out, err = nb("tag", one, "tiny/prod", "--cache", shared)
    assert code == 2 and out == ""
    assert err.splitlines() == [
        f"error: tiny/prod holds {two}; {one} is an older value of it (ls --history): "
        "nothing moved; pass --rollback to move it back"
    ]
    assert Store(shared).get_ref("tiny", "prod") == two
    code, out, err = nb("tag", one, "tiny/prod", "--rollback", "--cache", shared)
    assert (code, out) == (0, f"tiny/prod: {two} -> {one}\n"), err
    # After the rollback, the newer value is forward again; the older one stays older.
    code, out, err = nb("tag", two, "tiny/prod", "--cache", shared)
    assert (code, out) == (0, f"tiny/prod: {one} -> {two}\n"), err
    code, out, err = nb("tag", one, "tiny/prod", "--cache", shared)
    assert code == 2 and "pass --rollback" in err, err
    assert Store(shared).get_ref("tiny", "prod") == two
    # A manifest the ref never held is a move forward, without --rollback.
    code, out, err = nb("tag", two, "tiny/stable", "--cache", shared)
    assert code == 0, err


@pytest.mark.slow
def test_expect_moves_only_from_the_value_named(shared: str, tmp_path: Path) -> None:
    (job1, one), (job2, two) = job_folder(tmp_path, 1), job_folder(tmp_path, 2)
    code, _, err = push(job1, shared, "--expect", "none")
    assert code == 0, err
    code, out, err = push(job2, shared, "--expect", "none")
    assert code == 2 and out == ""
    assert err.strip() == (
        f"error: --expect none: tiny/latest holds {one}; nothing moved (expect what it holds, "
        "or --expect none for a new ref)"
    )
    store = Store(shared)
    assert store.get_ref("tiny", "latest") == one
    assert push(job2, shared, "--expect", one[:15])[0] == 0  # a unique prefix
    assert store.get_ref("tiny", "latest") == two

    code, _, err = nb("tag", "tiny/latest", "tiny/prod", "--expect", one, "--cache", shared)
    assert code == 2
    assert err.strip() == (
        f"error: --expect {one}: tiny/prod holds no manifest (no ref); nothing moved "
        "(expect what it holds, or --expect none for a new ref)"
    )
    assert store.get_ref("tiny", "prod") is None
    code, _, err = nb("tag", "tiny/latest", "tiny/prod", "--expect", "none", "--cache", shared)
    assert code == 0, err
    code, out, err = nb("tag", one, "tiny/prod", "--expect", two, "--rollback", "--cache", shared)
    assert (code, out) == (0, f"tiny/prod: {two} -> {one}\n"), err
    code, _, err = nb("tag", two, "tiny/prod", "--expect", "sha256:zz", "--cache", shared)
    assert (code, err.strip()) == (
        2,
        "error: --expect 'sha256:zz': give sha256:<hex> (or a prefix of one), or none",
    )
    code, _, err = nb("tag", two, "tiny/prod", "--expect", "sha256:0a", "--cache", shared)
    assert (code, err.strip()) == (
        2,
        "error: --expect: sha256:0a: a manifest prefix needs at least 8 hex digits "
        "(e.g. sha256:00000000); give more",
    )
    assert store.get_ref("tiny", "prod") == one


@pytest.mark.slow
def test_pull_follows_a_rolled_back_ref_and_names_its_previous_value(
    shared: str, tmp_path: Path
) -> None:
    (job1, one), (job2, two) = job_folder(tmp_path, 1), job_folder(tmp_path, 2)
    node = str(tmp_path / "node")
    for job in (job1, job2):
        assert push(job, shared)[0] == 0
        assert nb("tag", "tiny/latest", "tiny/prod", "--cache", shared)[0] == 0
    code, out, err = nb("pull", "tiny/prod", "--cache", shared, "--local-cache", node)
    assert code == 0, err
    assert out.splitlines()[-1] == f"tiny/prod: (new ref) -> {two}"
    assert nb("tag", one, "tiny/prod", "--rollback", "--cache", shared)[0] == 0

    args = ("pull", "tiny/prod", "--cache", shared, "--local-cache", node)
    code, out, err = nb(*args, "--json")
    assert code == 0, err  # a mirror: it follows the shared store's decision
    assert json.loads(out)["previous"] == two
    assert Store(node).get_ref("tiny", "prod") == one
    code, out, err = nb(*args)
    assert out.splitlines()[-1] == f"tiny/prod: already at {one}; nothing moved"


@pytest.mark.slow
def test_compile_of_an_old_recipe_is_refused_then_allowed_with_rollback(
    shared: str, tmp_path: Path
) -> None:
    """Re-running an old CI job: every unit cached, the old manifest sealed again."""
    env = double_env(tmp_path)
    (path,) = write_recipes(tmp_path, [double_recipe("app")])
    first = neuronbuild("compile", path, "--cache", shared, "--json", env=env)
    assert first.returncode == 0, first.stderr
    (report,) = json.loads(first.stdout)["recipes"]
    one = report["manifest"]
    assert report["previous"] is None
    recipe = Path(path)
    old_text = recipe.read_text()
    recipe.write_text(old_text + "serve: {served_model_name: demo}\n")  # the next release
    second = neuronbuild("compile", path, "--cache", shared, env=env)
    assert second.returncode == 0, second.stderr
    two = Store(shared).get_ref("app", "latest")
    assert f"app/latest: {one} -> {two}" in second.stdout.splitlines()

    recipe.write_text(old_text)  # the old job, run again
    again = neuronbuild("compile", path, "--cache", shared, env=env)
    assert again.returncode == 2
    assert again.stderr.splitlines()[-1] == (
        f"error: app/latest holds {two}; {one} is an older value of it (ls --history): "
        "nothing moved; pass --rollback to move it back"
    )
    assert Store(shared).get_ref("app", "latest") == two
    back = neuronbuild("compile", path, "--cache", shared, "--rollback", "--json", env=env)
    assert back.returncode == 0, back.stderr
    (report,) = json.loads(back.stdout)["recipes"]
    assert (report["previous"], report["manifest"]) == (two, one)


@pytest.mark.slow
def test_a_refused_move_does_not_hide_another_recipes_failure(tmp_path: Path) -> None:
    """Two recipes in one run: ``app``'s move back is refused, ``broken``'s unit fails. Both
    are reported (the refusal on stderr and in ``--json``), and the exit code is the failed
    units' (1), so CI shows the failure it must fix."""
    env = double_env(tmp_path, CPU_DOUBLE_FAIL_SEQS="3")
    app, broken = write_recipes(
        tmp_path, [double_recipe("app"), double_recipe("broken", max_num_seqs=3)]
    )
    cache = str(tmp_path / "shared")
    assert neuronbuild("compile", app, "--cache", cache, env=env).returncode == 0
    one = Store(cache).get_ref("app", "latest")
    recipe = Path(app)
    old_text = recipe.read_text()
    recipe.write_text(old_text + "serve: {served_model_name: demo}\n")
    assert neuronbuild("compile", app, "--cache", cache, env=env).returncode == 0
    two = Store(cache).get_ref("app", "latest")
    recipe.write_text(old_text)

    both = neuronbuild("compile", app, broken, "--cache", cache, env=env)
    assert both.returncode == 1, both.stderr
    refusal = (
        f"error: app/latest holds {two}; {one} is an older value of it (ls --history): "
        "nothing moved; pass --rollback to move it back"
    )
    lines = both.stderr.strip().splitlines()
    assert refusal in lines
    assert lines[-1].startswith("not sealed: some units failed")
    assert Store(cache).get_ref("app", "latest") == two
    as_json = neuronbuild("compile", app, broken, "--cache", cache, "--json", env=env)
    assert as_json.returncode == 1
    report = json.loads(as_json.stdout)
    assert report["refused"] == refusal.removeprefix("error: ")
    assert [r["n_units_by_status"]["failed"] for r in report["recipes"]] == [0, 1]


@pytest.mark.slow
def test_seal_reports_previous_and_refuses_a_move_back(tmp_path: Path) -> None:
    env = double_env(tmp_path)
    (path,) = write_recipes(tmp_path, [double_recipe("app")])
    cache = str(tmp_path / "shared")
    assert neuronbuild("compile", path, "--cache", cache, env=env).returncode == 0
    one = Store(cache).get_ref("app", "latest")
    sealed = neuronbuild("seal", path, "--cache", cache, "--tag", "prod", "--json", env=env)
    assert sealed.returncode == 0, sealed.stderr
    assert json.loads(sealed.stdout)["sealed"][0]["previous"] is None
    recipe = Path(path)
    old_text = recipe.read_text()
    recipe.write_text(old_text + "serve: {served_model_name: demo}\n")
    sealed = neuronbuild("seal", path, "--cache", cache, "--tag", "prod", env=env)
    assert sealed.returncode == 0, sealed.stderr
    two = Store(cache).get_ref("app", "prod")
    assert sealed.stdout.splitlines()[-1] == f"app/prod: {one} -> {two}"
    recipe.write_text(old_text)
    back = neuronbuild("seal", path, "--cache", cache, "--tag", "prod", env=env)
    assert back.returncode == 2
    assert "pass --rollback" in back.stderr
    assert Store(cache).get_ref("app", "prod") == two


@pytest.mark.slow
def test_expect_with_several_recipes_or_a_shard_is_a_usage_error(tmp_path: Path) -> None:
    env = double_env(tmp_path)
    paths = write_recipes(tmp_path, [double_recipe("a"), double_recipe("b", seed=1)])
    cache = str(tmp_path / "shared")
    for command in (
        ["compile", *paths, "--expect", "none"],
        ["seal", *paths, "--expect", "none"],
        ["compile", paths[0], "--shard", "0/2", "--rollback"],
    ):
        done = neuronbuild(*command, "--cache", cache, env=env)
        assert done.returncode == 2, command
        assert (
            "--expect: recipes of 2 names" in done.stderr or "a shard moves no ref" in done.stderr
        )
    assert not (tmp_path / "shared").exists()
    # An --expect that does not hold is refused before anything compiles.
    wrong = "sha256:" + "0" * 64
    done = neuronbuild("compile", paths[0], "--cache", cache, "--expect", wrong, env=env)
    assert done.returncode == 2
    assert "a/latest holds no manifest" in done.stderr
    assert not (tmp_path / "builds.jsonl").exists()


def test_the_check_runs_against_the_value_the_swap_replaces(tmp_path: Path) -> None:
    """Another writer moves the ref between our read and our swap (on to two, then three): the
    check reads the history the swap sees, not the one before, and refuses the now backward
    move."""
    from neuronbuild.store.moves import Ask, RefMovesBack, move_ref

    store = Store(str(tmp_path / "s"), create=True)
    one, two, three = (
        publish_build(store, cpu_recipe(cpu_isa="host", seed=seed), tmp_path, f"b{seed}")
        for seed in (1, 2, 3)
    )
    store.set_ref("tiny", "prod", one)
    real_get = store.get_ref
    raced: list[bool] = []

    def get_ref(name: str, tag: str) -> str | None:
        seen = real_get(name, tag)
        if not raced:  # the other writer lands right after our first read
            raced.append(True)
            store.set_ref("tiny", "prod", two)
            store.set_ref("tiny", "prod", three)
        return seen

    store.get_ref = get_ref  # type: ignore[method-assign]
    with pytest.raises(RefMovesBack):  # two was forward when read, is older when swapped
        move_ref(store, "tiny", "prod", two, Ask())
    assert raced and real_get("tiny", "prod") == three


def test_check_move_reads_the_chain_before_the_current_value() -> None:
    from neuronbuild.store.moves import Ask, RefMovesBack, check_move

    a, b, c = ("sha256:" + x * 64 for x in "abc")
    chain = [RefMove(1.0, a, None), RefMove(2.0, b, a)]
    check_move("n/t", chain, b, c, Ask())  # never held: forward
    check_move("n/t", chain, b, b, Ask())  # the value it holds: a no-op
    check_move("n/t", chain, b, a, Ask(rollback=True))
    with pytest.raises(RefMovesBack, match=r"n/t holds sha256:b+; sha256:a+ is an older"):
        check_move("n/t", chain, b, a, Ask())


def test_a_rollback_makes_the_newer_value_forward_again() -> None:
    """Older means first held before the current value: after B -> A, B is forward."""
    from neuronbuild.store.moves import Ask, RefMovesBack, check_move, older_values

    a, b, c = ("sha256:" + x * 64 for x in "abc")
    rolled = [RefMove(1.0, a, None), RefMove(2.0, b, a), RefMove(3.0, a, b)]
    assert older_values(rolled, a) == set()
    check_move("n/t", rolled, a, b, Ask())  # re-promoting b: forward
    again = [*rolled, RefMove(4.0, b, a)]
    assert older_values(again, b) == {a}
    with pytest.raises(RefMovesBack):
        check_move("n/t", again, b, a, Ask())
    # A current value the chain never reached (written by hand): every chain value is older.
    assert older_values(again, c) == {a, b}
    # The first move's previous value (a gap before it) arrived before its manifest.
    assert older_values([RefMove(1.0, b, a)], b) == {a}


def test_expect_that_loses_to_a_writer_moving_there_and_back_is_a_usage_error(
    tmp_path: Path,
) -> None:
    """With --expect, a swap that conflicts though the ref holds the expected value again (moved
    away and back meanwhile) says to re-run, exit 2, not a store fault."""
    from neuronbuild.errors import RefNotExpected
    from neuronbuild.store.cas import RefConflict
    from neuronbuild.store.moves import Ask, move_ref

    store = Store(str(tmp_path / "s"), create=True)
    one = publish_build(store, cpu_recipe(cpu_isa="host", seed=1), tmp_path, "a")
    two = publish_build(store, cpu_recipe(cpu_isa="host", seed=2), tmp_path, "b")
    store.set_ref("tiny", "prod", one)

    def lost(*args: object, **kwargs: object) -> str | None:
        raise RefConflict("tiny/prod points at another value")

    store.move_ref = lost  # type: ignore[method-assign]
    with pytest.raises(RefNotExpected, match=r"tiny/prod moved while moving it; .*re-run$"):
        move_ref(store, "tiny", "prod", two, Ask(expect=one))
    assert store.get_ref("tiny", "prod") == one


def test_compile_stage_refuses_expect_and_rollback(tmp_path: Path) -> None:
    """``compile --stage`` moves only the stage folder's ref: ``--expect``/``--rollback`` belong
    to the ``push`` that moves the shared one."""
    env = double_env(tmp_path)
    (path,) = write_recipes(tmp_path, [double_recipe("app")])
    stage = tmp_path / "stage"
    for option in (["--expect", "none"], ["--rollback"]):
        done = neuronbuild(
            "compile",
            path,
            "--cache",
            str(tmp_path / "shared"),
            "--stage",
            str(stage),
            *option,
            env=env,
        )
        assert done.returncode == 2, done.stderr
        assert done.stderr.strip().splitlines()[-1] == (
            f"error: {option[0]}: --stage moves no shared ref; give it to push"
        )
    assert not stage.exists() and not (tmp_path / "shared").exists()


@pytest.mark.parametrize(
    ("how", "refused", "kept"),
    [
        ("refused outright, ref unmoved", True, False),
        ("refused, yet the ref holds the move", True, True),
        ("an answer lost (timeout), ref unmoved", False, True),
    ],
)
def test_a_move_whose_swap_was_refused_keeps_no_history_entry_unless_it_may_have_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, refused: bool, kept: bool
) -> None:
    """Issue 46 item 17: a tag into an unwritable ``refs/`` kept the entry of its failed move.
    An entry goes where the store refused the swap outright (no permission, a read-only file
    system) and the ref, read again, does not hold the move's manifest; a failure that may have
    landed (a lost answer, applied late) keeps it, off the chain while the ref did not move."""
    from neuronbuild.errors import StoreError

    store = Store(str(tmp_path / "store"), create=True)
    first = publish_build(store, cpu_recipe(cpu_isa="host", seed=1), tmp_path, "a")
    second = publish_build(store, cpu_recipe(cpu_isa="host", seed=2), tmp_path, "b")
    real = store.backend.swap

    def failing(path: str, data: bytes, token: object) -> None:
        if how.endswith("holds the move"):
            real(path, data, token)
        error = StoreError(f"{store.url}: cannot write {path}: PermissionError: denied")
        error.refused = refused
        raise error

    monkeypatch.setattr(store.backend, "swap", failing)
    with pytest.raises(StoreError, match="denied"):
        store.move_ref("tiny", "latest", first, second)
    monkeypatch.undo()
    entries = [move.manifest for _, move in store.history_entries("tiny", "latest")]
    assert entries == ([first, second, first] if kept else [first, second])


def test_a_folder_that_refuses_the_write_is_a_refusal() -> None:
    """What marks a swap refused outright: the backends' mapping of a PermissionError (an
    unwritable folder, S3's 403) and of a read-only file system."""
    import errno

    from neuronbuild.transports.backends import FolderBackend

    backend = object.__new__(FolderBackend)
    backend.url = "/store"
    for exc, refused in (
        (PermissionError(errno.EACCES, "Permission denied"), True),
        (OSError(errno.EROFS, "Read-only file system"), True),
        (OSError(errno.EIO, "Input/output error"), False),
    ):
        with pytest.raises(Exception) as caught, backend._errors("cannot write refs/a/b"):
            raise exc
        assert getattr(caught.value, "refused", None) is refused, exc
