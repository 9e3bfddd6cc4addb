"""An S3-compatible endpoint that ignores conditional writes (issue 46 item 3: older MinIO, the
JuiceFS gateway, s3gw) is found by a probe, once per endpoint and bucket, before the first
create or swap: publishing there is refused in one line naming ``--last-writer-wins``, and with
it the store checks, then writes. moto's server honours both headers; the endpoint that ignores
them is that server behind a client that drops them, which S3 then sees as such a server's
requests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import UserError
from neuronbuild.store.cas import Store
from neuronbuild.transports import backends
from tests.lib.builders import cpu_recipe, publish_build
from tests.lib.claims import fresh_url, s3_root

__all__ = ["s3_root"]  # the module-scoped moto server fixture


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Each probe's outcome, in order, with the once-per-process record emptied around it."""
    monkeypatch.setattr(backends, "_IGNORED_CONDITION", {})
    found: list[str] = []
    real = backends.ObjectBackend._ignored_condition

    def probe(self: backends.ObjectBackend) -> str | None:
        ignored = real(self)
        found.append(str(ignored))
        return ignored

    monkeypatch.setattr(backends.ObjectBackend, "_ignored_condition", probe)
    yield found


def ignoring(store: Store, header: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``store``'s endpoint ignore ``header`` on PUT (its client no longer sends it)."""
    real = store.backend.fs.pipe_file
    dropped = {"If-None-Match": "mode", "If-Match": "IfMatch"}[header]

    def pipe_file(path: str, data: bytes, **kwargs: Any) -> Any:
        kwargs.pop(dropped, None)
        return real(path, data, **kwargs)

    monkeypatch.setattr(store.backend.fs, "pipe_file", pipe_file)


@pytest.mark.parametrize("header", ["If-None-Match", "If-Match"])
def test_publishing_where_conditional_writes_are_ignored_is_refused_unless_last_writer_wins(
    s3_root: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    probes: list[str],
    header: str,
) -> None:
    url = fresh_url("s3", tmp_path, s3_root)
    store = Store(url, create=True)
    ignoring(store, header, monkeypatch)
    with pytest.raises(UserError, match=f"ignores {header} on PUT.*--last-writer-wins") as caught:
        publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, "a")
    assert "\n" not in str(caught.value)
    assert store.refs() == {} and store.manifest_digests() == []
    assert store.backend.find(store.layout.folder("tmp")) == []  # the probe's object is gone

    opted = Store(url, last_writer_wins=True)
    ignoring(opted, header, monkeypatch)
    digest = publish_build(opted, cpu_recipe(cpu_isa="host"), tmp_path, "b")
    assert opted.get_ref("tiny", "latest") == digest
    assert not opted.backend.create(opted.layout.manifest(digest), b"another")  # checked first
    assert probes == [header]  # once for the endpoint and bucket


def test_an_endpoint_that_honours_them_is_probed_once_and_publishes(
    s3_root: str, tmp_path: Path, probes: list[str]
) -> None:
    for seed in ("a", "b"):
        store = Store(fresh_url("s3", tmp_path, s3_root), create=True)
        publish_build(store, cpu_recipe(cpu_isa="host"), tmp_path, seed)
    assert probes == ["None"]
