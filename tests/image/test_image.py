"""Issue 23, item 3: ``neuronbuild image`` pushes a manifest's node image to a real OCI registry
(Debian's docker-registry on loopback). Read back over HTTP, the image is a valid OCI image (its
config's ``rootfs.diff_ids`` name its layer) whose one layer unpacks to exactly the tree ``serve``
lays out, plus the image's stamp; one manifest gives one image digest, whatever the run; a
mistake is one line (exit 2), an unreachable registry one line (exit 3)."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import shutil
import tarfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from neuronbuild.errors import StoreDataInvalid, StoreError, message_lines
from neuronbuild.image.build import build_image
from neuronbuild.image.layer import tree
from neuronbuild.node.image_stamp import image_manifest_path
from neuronbuild.node.materialize import lay_out
from neuronbuild.store.cas import Store
from neuronbuild.store.layout import IMAGE_STORE, NODE_STAMP
from neuronbuild.store.tiered import TieredStore
from neuronbuild.transports import retry
from neuronbuild.transports.oci_registry import parse_registry_url
from tests.lib import planted
from tests.lib.builders import publish_build
from tests.lib.claims import small_recipe
from tests.lib.commands import neuronbuild
from tests.lib.keys import write_key
from tests.lib.registry import RegistryServer
from tests.lib.seaweed import free_ports

ACCEPT = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"


def get(reg: RegistryServer, path: str, accept: str = "*/*") -> bytes:
    request = urllib.request.Request(f"{reg.url}/v2/{path}", headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=10) as answer:
        return bytes(answer.read())


def pulled(reg: RegistryServer, repository: str, reference: str) -> dict[str, Any]:
    """The image manifest, config and layer bytes, as a runtime pulls them."""
    data = get(reg, f"{repository}/manifests/{reference}", ACCEPT)
    manifest = json.loads(data)
    config = get(reg, f"{repository}/blobs/{manifest['config']['digest']}")
    [layer] = manifest["layers"]
    blob = get(reg, f"{repository}/blobs/{layer['digest']}")
    return {
        "digest": "sha256:" + hashlib.sha256(data).hexdigest(),
        "manifest": manifest,
        "config": json.loads(config),
        "config_digest": "sha256:" + hashlib.sha256(config).hexdigest(),
        "layer": blob,
    }


def unpack(layer: bytes, dest: Path) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r:") as tar:
        members = tar.getmembers()
        tar.extractall(dest, filter="tar")
    return members


def tree_of(root: Path) -> dict[str, tuple[bytes, bool]]:
    """Each file under ``root`` but the image's or serve's own (the stamp, the image's copy of
    the manifest, under ``.neuronbuild/``): its bytes and whether it is executable."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), bool(p.stat().st_mode & 0o100))
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.relative_to(root).parts[0] != ".neuronbuild"
    }


def built(tmp_path: Path) -> tuple[Store, str]:
    store = Store(str(tmp_path / "store"), create=True)
    return store, publish_build(store, small_recipe(tmp_path), tmp_path, "a")


def test_the_pushed_image_unpacks_to_exactly_the_tree_serve_lays_out(
    reg: RegistryServer, tmp_path: Path
) -> None:
    store, digest = built(tmp_path)
    to = f"oci+http://{reg.host}/nb/claims:v1"
    result = neuronbuild("image", "claims/latest", "--cache", store.url, "--to", to)
    assert result.returncode == 0, result.stderr
    image = pulled(reg, "nb/claims", "v1")
    assert result.stdout.splitlines()[-1] == f"{reg.host}/nb/claims@{image['digest']}"
    layer = image["manifest"]["layers"][0]
    assert layer["mediaType"] == "application/vnd.oci.image.layer.v1.tar"
    assert layer["digest"] == "sha256:" + hashlib.sha256(image["layer"]).hexdigest()
    assert image["manifest"]["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert image["manifest"]["config"]["digest"] == image["config_digest"]
    config = image["config"]
    assert config["rootfs"] == {"type": "layers", "diff_ids": [layer["digest"]]}
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    members = unpack(image["layer"], tmp_path / "image")
    assert all((m.uid, m.gid, m.uname, m.gname, m.mtime) == (0, 0, "", "", 0) for m in members)
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.split("/")) and str(tmp_path) not in str(names)
    served = tmp_path / "served"
    lay_out(store.get_manifest(digest), digest, TieredStore(store), served)
    assert tree_of(tmp_path / "image") == tree_of(served)
    stamp = json.loads((tmp_path / "image" / NODE_STAMP).read_bytes())
    assert stamp["manifest"] == digest and stamp["image"] is True
    carried = (tmp_path / "image" / IMAGE_STORE).rglob("*")
    assert [p.relative_to(tmp_path / "image") for p in carried if p.is_file()] == [
        Path(image_manifest_path(digest))
    ]
    assert (tmp_path / "image" / image_manifest_path(digest)).read_bytes() == (
        store.get_manifest(digest).to_bytes()
    )


def test_one_manifest_gives_one_image_digest_whatever_the_run(
    reg: RegistryServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, digest = built(tmp_path)
    first = build_image(store, digest, parse_registry_url(f"oci+http://{reg.host}/nb/a:x", "--to"))
    (tmp_path / "elsewhere").mkdir()
    copy = Store(str(tmp_path / "copy"), create=True)  # another store, another temporary folder
    shutil.copytree(store.root, copy.root, dirs_exist_ok=True)
    monkeypatch.setattr("os.umask", lambda mask: 0)
    again = build_image(
        copy,
        digest,
        parse_registry_url(f"oci+http://{reg.host}/nb/b", "--to"),
        scratch=tmp_path / "elsewhere",
    )
    assert first.image is not None and (first.image, first.layer) == (again.image, again.layer)
    assert first.uploaded == 2 and again.uploaded == 2  # another repository: blobs pushed again
    assert pulled(reg, "nb/b", first.image)["digest"] == first.image  # pushed by digest alone


def one_line(result: Any, code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    return str(line)


@pytest.mark.parametrize(
    ("to", "says"),
    [
        ("http://127.0.0.1:5000/nb/x", "expected oci://HOST[:PORT]/REPOSITORY[:TAG]"),
        ("oci://127.0.0.1:5000", "is not a repository name"),
        ("oci://127.0.0.1:5000/NB/Upper", "is not a repository name"),
        ("oci://127.0.0.1:99999/nb/x", "is not a registry host[:port]"),
        ("oci://127.0.0.1:5000/nb/x:bad tag!", "is not a tag"),
        ("oci://127.0.0.1:5000/nb/x@sha256:" + "0" * 64, "a digest names an image that exists"),
    ],
)
def test_a_bad_to_is_one_line_naming_it(tmp_path: Path, to: str, says: str) -> None:
    store, _ = built(tmp_path)
    line = one_line(neuronbuild("image", "claims", "--cache", store.url, "--to", to), 2)
    assert line.startswith("error: --to ") and says in line, line


def test_an_unknown_ref_is_one_line_exit_2(reg: RegistryServer, tmp_path: Path) -> None:
    store, _ = built(tmp_path)
    to = f"oci+http://{reg.host}/nb/x"
    line = one_line(neuronbuild("image", "nope/prod", "--cache", store.url, "--to", to), 2)
    assert "nope/prod" in line


def test_an_unreachable_registry_is_one_line_exit_3_after_retries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, digest = built(tmp_path)
    (port,) = free_ports(1)  # nothing listens there
    dest = parse_registry_url(f"oci+http://127.0.0.1:{port}/nb/x", "--to")
    monkeypatch.setattr(retry, "BASE_SECONDS", 0.01)
    with pytest.raises(StoreError) as caught:
        build_image(store, digest, dest)
    [line] = message_lines(caught.value)
    assert f"registry 127.0.0.1:{port} unreachable" in line and "tried 5 times" in line
    result = neuronbuild("image", digest, "--cache", store.url, "--to", dest.url, "-q")
    assert "unreachable" in one_line(result, 3)


def test_attestations_travel_as_referrers_of_the_image_whose_digest_stays(
    reg: RegistryServer, tmp_path: Path
) -> None:
    store, digest = built(tmp_path)
    plain = build_image(
        store, digest, parse_registry_url(f"oci+http://{reg.host}/nb/signed", "--to")
    )
    assert plain.attestations == 0
    write_key(tmp_path / "ci.key")
    signed = neuronbuild("sign", digest, "--key", str(tmp_path / "ci.key"), "--cache", store.url)
    assert signed.returncode == 0, signed.stderr
    again = build_image(
        store, digest, parse_registry_url(f"oci+http://{reg.host}/nb/signed", "--to")
    )
    assert again.image == plain.image and again.attestations == 1
    assert again.image is not None
    index = json.loads(get(reg, f"nb/signed/manifests/sha256-{again.image[7:]}", INDEX))
    [entry] = index["manifests"]
    assert entry["artifactType"] == "application/vnd.dsse.envelope.v1+json"
    referrer = json.loads(get(reg, f"nb/signed/manifests/{entry['digest']}", ACCEPT))
    assert referrer["subject"]["digest"] == again.image
    [envelope] = store.get_attestations(digest).values()
    assert get(reg, f"nb/signed/blobs/{referrer['layers'][0]['digest']}") == envelope
    build_image(store, digest, parse_registry_url(f"oci+http://{reg.host}/nb/signed", "--to"))
    index = json.loads(get(reg, f"nb/signed/manifests/sha256-{again.image[7:]}", INDEX))
    assert len(index["manifests"]) == 1  # pushed again: listed once


def dsse_verified(envelope: bytes, public_pem: bytes) -> dict[str, Any]:
    """The Statement of a DSSE envelope whose one signature an Ed25519 ``public_pem`` verifies
    over the pre-authentication encoding (DSSE ``protocol.md``), as cosign checks it: written
    here from the spec, not with neuronbuild's reader."""
    import base64

    from cryptography.hazmat.primitives.serialization import load_pem_public_key

    value = json.loads(envelope)
    payload, kind = base64.b64decode(value["payload"]), value["payloadType"].encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)
    [signature] = value["signatures"]
    load_pem_public_key(public_pem).verify(base64.b64decode(signature["sig"]), pae)  # type: ignore[call-arg, union-attr]
    return dict(json.loads(payload))


def test_the_image_signed_with_key_names_its_own_digest_as_the_in_toto_subject(
    reg: RegistryServer, tmp_path: Path
) -> None:
    """Issue 43 item 5: admission controllers (cosign verify-attestation, policy-controller) match
    an attestation's subject against the image digest; the build's names the neuronbuild
    manifest, so ``image --key`` signs the image itself."""
    store, digest = built(tmp_path)
    public = write_key(tmp_path / "ci.key")
    assert neuronbuild("sign", digest, "--key", str(tmp_path / "ci.key"), "--cache", store.url)
    to = f"oci+http://{reg.host}/nb/admitted:v1"
    done = neuronbuild(
        "image",
        digest,
        "--cache",
        store.url,
        "--to",
        to,
        "--key",
        str(tmp_path / "ci.key"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    image = report["image"]
    assert report["attestations"] == 2 and report["signed_by"].startswith("key ")
    index = json.loads(get(reg, f"nb/admitted/manifests/sha256-{image[7:]}", INDEX))
    by_subject = {m["annotations"]["dev.neuronbuild.subject"]: m for m in index["manifests"]}
    assert sorted(by_subject) == ["image", "manifest"]
    referrer = json.loads(
        get(reg, f"nb/admitted/manifests/{by_subject['image']['digest']}", ACCEPT)
    )
    assert referrer["subject"]["digest"] == image
    envelope = get(reg, f"nb/admitted/blobs/{referrer['layers'][0]['digest']}")
    told = dsse_verified(envelope, public.read_bytes())
    assert told["subject"] == [{"name": f"{reg.host}/nb/admitted", "digest": {"sha256": image[7:]}}]
    definition = told["predicate"]["buildDefinition"]
    assert definition["buildType"] == "https://neuronbuild.dev/node-image/v1"
    assert definition["resolvedDependencies"] == [
        {"name": "claims", "digest": {"sha256": digest[7:]}}
    ]
    manifest_side = json.loads(
        get(reg, f"nb/admitted/manifests/{by_subject['manifest']['digest']}", ACCEPT)
    )
    build = dsse_verified(
        get(reg, f"nb/admitted/blobs/{manifest_side['layers'][0]['digest']}"), public.read_bytes()
    )
    assert build["subject"][0]["digest"] == {"sha256": digest[7:]}  # the build's: the manifest
    layer = pulled(reg, "nb/admitted", "v1")["layer"]
    planted.assert_none_in("the image and its referrers", layer, envelope)  # env held them


def test_a_bad_image_key_is_one_line_before_the_store_is_read(tmp_path: Path) -> None:
    line = one_line(
        neuronbuild(
            "image",
            "app/latest",
            "--cache",
            str(tmp_path / "none"),
            "--to",
            "oci://reg.example/nb",
            "--key",
            str(tmp_path / "missing.key"),
        ),
        2,
    )
    assert "--key" in line and "missing.key" in line


def test_a_dry_run_checks_the_store_and_the_registry_and_pushes_nothing(
    reg: RegistryServer, tmp_path: Path
) -> None:
    store, digest = built(tmp_path)
    to = f"oci+http://{reg.host}/nb/dry:v1"
    result = neuronbuild("image", digest, "--cache", store.url, "--to", to, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"would push the image of {digest} to {to}: 2 files")
    with pytest.raises(urllib.error.HTTPError):
        get(reg, "nb/dry/manifests/v1", ACCEPT)
    [blob] = [f for f in store.get_manifest(digest).blobs() if f.path.endswith("model")]
    Path(store.local_blob_path(blob) or "").unlink()
    line = one_line(neuronbuild("image", digest, "--cache", store.url, "--to", to, "--dry-run"), 2)
    assert f"manifest {digest} is incomplete" in line and "1 blob missing" in line


def test_a_manifest_path_in_the_stamps_folder_is_refused(tmp_path: Path) -> None:
    store, digest = built(tmp_path)
    manifest = store.get_manifest(digest)
    unit = manifest.units[0]
    hostile = dataclasses.replace(
        unit, files=(*unit.files, dataclasses.replace(unit.files[0], path=NODE_STAMP))
    )
    with pytest.raises(StoreDataInvalid, match=r"inside \.neuronbuild/, the stamp's"):
        tree(dataclasses.replace(manifest, units=(hostile,)), [NODE_STAMP])
