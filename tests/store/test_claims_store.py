"""The folder store's headline claims, each isolated: atomic writes (temporary file then rename)
and durable writes (fsync of the file before its name, of the folder after). The claims every
backend makes (compare-and-swap refs and their history, publish order, the presence check) are
the conformance suite's: ``conformance.py``, run per backend by ``test_conformance.py``."""

from __future__ import annotations

import builtins
import errno
import os
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import StoreError
from neuronbuild.store.cas import Store
from tests.lib.builders import publish_build
from tests.lib.claims import small_recipe


class DyingWrites:
    """Make every file the folder backend writes fail half way (a full disk, a crash): the data
    written so far stays where it was written."""

    def __init__(self) -> None:
        self.real_open = builtins.open

    def __call__(self, file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        f = self.real_open(file, mode, *args, **kwargs)
        if "w" not in mode and "x" not in mode:
            return f
        real_write = f.write

        def write(data: bytes) -> int:
            real_write(data[: len(data) // 2])
            f.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

        f.write = write
        return f


def test_a_folder_write_that_dies_half_way_leaves_the_old_object_or_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    backend = store.backend
    old = store.layout.ref("claims", "latest")
    backend.put(old, b"old bytes\n")
    source = tmp_path / "blob"
    source.write_bytes(b"x" * 100_000)
    monkeypatch.setattr("neuronbuild.transports.backends.open", DyingWrites(), raising=False)
    new = [store.layout.unit("sha256:" + "1" * 64), store.layout.blob("sha256:" + "2" * 64)]
    with pytest.raises(StoreError):
        backend.put(old, b"new bytes that never fully land\n")
    with pytest.raises(StoreError):
        backend.create(new[0], b"{}" * 1000)
    with pytest.raises(StoreError):
        backend.put_file(source, new[1])
    with pytest.raises(StoreError):
        backend.swap(old, b"swapped\n", b"old bytes\n")
    assert Path(old).read_bytes() == b"old bytes\n"
    assert not any(Path(p).exists() for p in new)


class DurabilityTrace:
    """Records fsync (with the path of the descriptor), rename and link calls, in order."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.events: list[tuple[str, str, str]] = []
        real_fsync, real_replace, real_link = os.fsync, os.replace, os.link

        def fsync(fd: int) -> None:
            self.events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"), ""))
            real_fsync(fd)

        def replace(src: Any, dst: Any, **kw: Any) -> None:
            real_replace(src, dst, **kw)
            self.events.append(("name", os.path.realpath(src), os.path.realpath(dst)))

        def link(src: Any, dst: Any, **kw: Any) -> None:
            real_link(src, dst, **kw)
            self.events.append(("name", os.path.realpath(src), os.path.realpath(dst)))

        monkeypatch.setattr(os, "fsync", fsync)
        monkeypatch.setattr(os, "replace", replace)
        monkeypatch.setattr(os, "link", link)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to name descriptors")
def test_every_published_object_is_synced_before_it_is_named_and_its_folder_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    trace = DurabilityTrace(monkeypatch)
    publish_build(store, small_recipe(tmp_path), tmp_path, "a")
    named = [(i, src, dst) for i, (op, src, dst) in enumerate(trace.events) if op == "name"]
    kinds = {Path(dst).relative_to(store.root).parts[0] for _, _, dst in named}
    assert {"blobs", "units", "manifests", "refs", "history"} <= kinds, kinds
    for i, src, dst in named:
        synced_before = [p for op, p, _ in trace.events[:i] if op == "fsync"]
        synced_after = [p for op, p, _ in trace.events[i + 1 :] if op == "fsync"]
        assert src in synced_before, f"{dst} named before its bytes were synced"
        assert os.path.dirname(dst) in synced_after, f"{dst}: its folder was never synced"
