"""``serve``'s checks before the first fetch are one ordered list (issue 40 item 4): a new check is
one function and one line, it sees what the checks before it found, and what it refuses is
refused before a byte is fetched or laid out."""

from __future__ import annotations

from pathlib import Path

import pytest

from neuronbuild.errors import UserError
from neuronbuild.store.cas import Store
from neuronbuild.store.tiered import TieredStore
from neuronbuild_runtime import serve_checks
from neuronbuild_runtime.serve import ServeSource, prepare
from tests.runtime.test_serve_node import published


def test_the_checks_run_in_the_order_a_user_would_fix_things() -> None:
    assert [check.__name__ for check in serve_checks.CHECKS] == [
        "node_as_built",
        "model_here",
        "weights_as_built",
        "root_apart",
        "root_usable",
        "local_tier_writable",
        "address_free",
    ]


def test_a_new_check_is_one_line_and_refuses_before_anything_is_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recipe, store = published(tmp_path)
    local = tmp_path / "local"
    seen: list[tuple[bool, bool, list[str]]] = []

    def not_on_this_node(view: serve_checks.NodeView) -> None:
        seen.append((view.ready, view.missing, [m.name for m in view.allowed]))
        raise UserError("this node is reserved; serve elsewhere")

    monkeypatch.setattr(serve_checks, "CHECKS", (*serve_checks.CHECKS, not_on_this_node))
    tiers = TieredStore(Store(str(local), create=True), Store(str(store)))
    root = tmp_path / "root"
    with pytest.raises(UserError, match=r"^this node is reserved; serve elsewhere$"):
        prepare(ServeSource(recipe=str(recipe)), tiers, cache_root=root, check_address=False)
    assert seen == [(False, True, [])]  # what the checks before it found
    assert not root.exists() and list((local / "blobs").rglob("*")) == []
    monkeypatch.setattr(serve_checks, "CHECKS", serve_checks.CHECKS[:-1])
    prepared = prepare(ServeSource(recipe=str(recipe)), tiers, cache_root=root, check_address=False)
    assert prepared.laid_out and list((local / "blobs").rglob("*"))
