"""Issue 43 item 2: rollback and freeze. A store writer who cannot sign points ``app/prod`` back at
an older build CI once signed: a node that served a newer signed build under that ref refuses it
(``serve --rollback`` or signing the old build again lets it through). A policy rule's
``max_age_days`` refuses a build whose newest signature is older (a node shown a frozen store),
from the local tier as from the store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from securesystemslib.signer import Signer

from neuronbuild.attest.builder import builder_from_env
from neuronbuild.attest.envelope import sign_statement
from neuronbuild.attest.keys import load_signer
from neuronbuild.attest.policy import load_policy
from neuronbuild.attest.statement import iso_time, statement
from neuronbuild.store.cas import Store
from tests.attest.test_bindings import fleet, serve
from tests.lib.builders import cpu_recipe, publish_build
from tests.lib.commands import neuronbuild_in_process
from tests.lib.keys import write_key

__all__ = ["fleet"]
HOUR = 3600.0


def sign_at(fleet: dict[str, Path], digest: str, when: float) -> None:
    """CI's key signs ``digest`` as ``sign`` does, its Statement made at ``when`` (seconds)."""
    store = Store(str(fleet["store"]))
    told = statement(store.get_manifest(digest), digest, builder_from_env({}))
    told["predicate"]["runDetails"]["metadata"]["finishedOn"] = iso_time(when)
    signer = load_signer(str(fleet["root"] / "ci.key"), "--key")
    assert isinstance(signer, Signer)
    store.put_attestation(digest, signer.public_key.keyid, sign_statement(told, signer))


def point(fleet: dict[str, Path], ref: str, digest: str) -> None:
    """The store writer's move: the ref's file rewritten by hand."""
    path = Path(Store(str(fleet["store"])).layout.ref(*ref.split("/")))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(digest + "\n")


@pytest.fixture
def builds(
    fleet: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[str, Path], str, str]:
    """``app``'s build signed two hours ago (old) and a newer one signed a minute ago (new),
    ``app/prod`` at the new one, and this node's cache in the test's folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(fleet["root"] / "node-cache"))
    store = Store(str(fleet["store"]))
    old = store.get_ref("app", "latest")
    recipe = cpu_recipe(cpu_isa="host", name="app", model="./m", max_num_seqs=2)
    new = publish_build(store, recipe, fleet["root"], "c")
    assert old is not None and new != old
    sign_at(fleet, old, time.time() - 2 * HOUR)
    sign_at(fleet, new, time.time() - 60)
    point(fleet, "app/prod", new)
    return fleet, old, new


def test_a_ref_moved_back_to_an_older_signed_build_is_refused(
    builds: tuple[dict[str, Path], str, str],
) -> None:
    fleet, old, _ = builds
    assert serve(fleet, "app/prod")[0] == 0  # the node serves the newer build
    point(fleet, "app/prod", old)
    code, err = serve(fleet, "app/prod", local="local-2")
    assert code == 2, err
    assert err.strip().count("\n") == 0, err
    assert f"app/prod ({old[:19]}) is a rollback: its newest signature was made " in err, err
    assert "or pass serve --rollback" in err, err

    assert serve(fleet, "app/prod", "--dry-run", local="local-3")[0] == 2  # a dry run refuses too
    assert serve(fleet, "app/prod", "--rollback", local="local-4")[0] == 0  # the operator's say


def test_a_signed_rollback_needs_no_flag_and_the_same_build_is_never_a_rollback(
    builds: tuple[dict[str, Path], str, str],
) -> None:
    fleet, old, new = builds
    assert serve(fleet, "app/prod")[0] == 0
    sign_at(fleet, new, time.time() - HOUR)  # an older signature of the same build: no harm
    assert serve(fleet, "app/prod", local="local-2")[0] == 0
    point(fleet, "app/prod", old)
    code, _, err = neuronbuild_in_process(
        "sign", old, "--key", str(fleet["root"] / "ci.key"), "--cache", str(fleet["store"])
    )
    assert code == 0, err
    assert serve(fleet, "app/prod", local="local-3")[0] == 0
    point(fleet, "app/prod", new)  # signed a minute ago, before the signed rollback
    assert serve(fleet, "app/prod", local="local-4")[0] == 2


def test_a_rule_with_max_age_days_refuses_a_stale_signature(
    builds: tuple[dict[str, Path], str, str],
) -> None:
    fleet, _, new = builds
    text = (
        fleet["policy"].read_text().replace("signers: [ci]", "signers: [ci]\n    max_age_days: 1")
    )
    fleet["policy"].write_text(text)
    assert serve(fleet, "app/prod")[0] == 0
    sign_at(fleet, new, time.time() - 2 * 86400 - 60)
    code, err = serve(fleet, "app/prod", "--rollback", local="local-2")
    assert code == 2, err
    assert "its newest accepted signature was made 2.0 days ago (" in err, err
    assert "refs[0] ('**') allows 1 days (max_age_days)" in err, err

    policy = load_policy(fleet["policy"])
    manifest = Store(str(fleet["store"])).get_manifest(new)
    attestations = list(Store(str(fleet["store"])).get_attestations(new).items())
    fresh = time.time() - 2 * 86400 + 2 * HOUR
    assert policy.refusal("app/prod", new, attestations, manifest=manifest, now=fresh) is None


def test_a_policy_rule_takes_max_age_days_and_refuses_a_bad_one(tmp_path: Path) -> None:
    from neuronbuild.attest.policy import PolicyInvalid, parse_policy

    write_key(tmp_path / "k.key")
    for bad in (0, -1, "1", True):
        data = {
            "signers": {"ci": {"keys": ["k.pub"]}},
            "refs": [{"match": "**", "signers": ["ci"]}],
        }
        data["refs"][0]["max_age_days"] = bad
        with pytest.raises(PolicyInvalid, match=r"refs\[0\].max_age_days: expected a number"):
            parse_policy(data, "p.yaml", tmp_path)


def test_a_node_that_cannot_keep_its_record_refuses_in_one_line(
    builds: tuple[dict[str, Path], str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review of issue 43: a record that cannot be written would forget every rollback."""
    fleet = builds[0]
    blocked = fleet["root"] / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    code, err = serve(fleet, "app/prod")
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "cannot record what this node serves under app/prod (rollback protection)" in err
