"""OCI registries as stores, against a real one (the CNCF distribution registry on loopback): the
README's CI flow end to end, the faults a registry meets (down, 5xx, wrong bytes served), hostile
tags in the repository, and the URL forms."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path

import pytest

from neuronbuild.digest import canonical_json, sha256_digest
from neuronbuild.errors import StoreDataInvalid, StoreError, UserError
from neuronbuild.notices import set_retry_listener
from neuronbuild.store.cas import Store
from neuronbuild.store.oci import RegistryBackend, artifact_type
from neuronbuild.store.records import FileRecord, Manifest, UnitRecord
from neuronbuild.transports import retry
from neuronbuild.transports.oci_registry import Registry, bytes_body, parse_registry_url
from tests.lib.builders import cpu_recipe, model_folder, publish_build
from tests.lib.commands import neuronbuild, serve_without_vllm
from tests.lib.faulty_proxy import FaultyProxy
from tests.lib.registry import registry_root

__all__ = ["registry_root"]  # the module's registry


@pytest.fixture
def oci_url(registry_root: str) -> str:
    return f"{registry_root}/neuronbuild/{uuid.uuid4().hex[:10]}"


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Retries a hundred times faster; returns the retry lines said, as they come."""
    monkeypatch.setattr(retry, "BASE_SECONDS", 0.01)
    said: list[str] = []
    previous = set_retry_listener(lambda attempt, attempts, s, why: said.append(why))
    yield said
    set_retry_listener(previous)


def proxied(url: str, proxy: FaultyProxy) -> str:
    """``url``'s repository reached through ``proxy``."""
    repository = parse_registry_url(url).repository
    return f"oci+http://127.0.0.1:{proxy.port}/{repository}"


def registry_port(url: str) -> int:
    return int(parse_registry_url(url).host.rpartition(":")[2])


def demo_recipe(tmp_path: Path) -> dict[str, object]:
    return cpu_recipe(name="remote-demo", cpu_isa="host", model=str(model_folder(tmp_path)))


@pytest.mark.slow
def test_the_readme_ci_flow_compile_push_tag_pull_serve(oci_url: str, tmp_path: Path) -> None:
    """A CI job's stage (a published build in a folder store) pushed to the registry, tagged,
    pulled onto a node and served (up to the exec of vLLM), each as its command."""
    stage = Store(str(tmp_path / "ci-store"), create=True)
    digest = publish_build(stage, demo_recipe(tmp_path), tmp_path, "a")
    pushed = neuronbuild("push", "remote-demo/latest", "--from", stage.url, "--cache", oci_url)
    assert pushed.returncode == 0, pushed.stderr
    tagged = neuronbuild("tag", "remote-demo/latest", "remote-demo/prod", "--cache", oci_url)
    assert tagged.returncode == 0, tagged.stderr
    listed = neuronbuild("ls", "--cache", oci_url, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["refs"] == {
        "remote-demo/latest": digest,
        "remote-demo/prod": digest,
    }
    verified = neuronbuild("verify", "remote-demo/prod", "--cache", oci_url, "--deep")
    assert verified.returncode == 0, verified.stderr
    node = tmp_path / "node-cache"
    pulled = neuronbuild("pull", "remote-demo/prod", "--cache", oci_url, "--local-cache", str(node))
    assert pulled.returncode == 0, pulled.stderr
    dry = neuronbuild(
        "serve", "--ref", "remote-demo/prod", "--local-cache", str(node), "--dry-run",
        "--cache", oci_url, "--workdir", str(tmp_path),
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    served = serve_without_vllm(
        "--ref", "remote-demo/prod", "--cache", oci_url, "--local-cache", str(node),
        "--vllm-cache-root", str(tmp_path / "root"),
    )  # fmt: skip
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout)["manifest"] == digest
    assert (tmp_path / "root" / "torch_compile_cache/aot/k/rank_0_0/model").is_file()


def test_a_manifest_is_an_oci_artifact_whose_layers_are_its_blobs(
    oci_url: str, tmp_path: Path
) -> None:
    """So the registry's garbage collector keeps a tagged build's blobs, and the config blob is
    the neuronbuild manifest's own bytes (one digest for both)."""
    store = Store(oci_url)
    digest = publish_build(store, demo_recipe(tmp_path), tmp_path, "a")
    backend = store.backend
    assert isinstance(backend, RegistryBackend)
    got = backend.registry.get_manifest(f"manifest-{digest[7:]}")
    assert got is not None
    oci = json.loads(got[0])
    assert oci["artifactType"] == artifact_type("manifests")
    assert oci["config"]["digest"] == digest
    manifest = store.get_manifest(digest)
    assert {layer["digest"] for layer in oci["layers"]} == {f.digest for f in manifest.files()}
    unit = backend.registry.get_manifest(f"unit-{manifest.units[0].key[7:]}")
    assert unit is not None
    assert {layer["digest"] for layer in json.loads(unit[0])["layers"]} == {
        f.digest for f in manifest.units[0].files
    }


def test_a_registry_that_refuses_connections_fails_at_once_with_exit_3() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    url = f"oci+http://127.0.0.1:{closed}/team/cache"
    with pytest.raises(StoreError, match="refuses connections"):
        Store(url)
    result = neuronbuild("ls", "--cache", url)
    assert result.returncode == 3
    assert result.stderr.strip().count("\n") == 0 and "refuses connections" in result.stderr


def test_a_registry_that_goes_down_is_retried_with_lines_then_a_store_error(
    oci_url: str, tmp_path: Path, fast_retries: list[str]
) -> None:
    publish_build(Store(oci_url), demo_recipe(tmp_path), tmp_path, "a")
    with FaultyProxy(registry_port(oci_url)) as proxy:
        store = Store(proxied(oci_url, proxy))
        proxy.down = True
        with pytest.raises(StoreError, match=rf"HTTP 500.*tried {retry.ATTEMPTS} times"):
            store.get_ref("remote-demo", "latest")
    assert len(fast_retries) == retry.ATTEMPTS - 1
    assert all("HTTP 500" in line for line in fast_retries)


@pytest.mark.slow
def test_injected_500s_are_retried_and_the_build_goes_through(
    oci_url: str, tmp_path: Path, fast_retries: list[str]
) -> None:
    with FaultyProxy(registry_port(oci_url), fail_every=4) as proxy:
        store = Store(proxied(oci_url, proxy))
        digest = publish_build(store, demo_recipe(tmp_path), tmp_path, "a")
        for file in store.get_manifest(digest).files():
            assert store.check_blob(file) is None
        assert proxy.failed > 0
    assert len(fast_retries) >= proxy.failed
    assert Store(oci_url).get_ref("remote-demo", "latest") == digest


@pytest.mark.slow
def test_a_blob_served_with_other_bytes_is_corrupt_exit_2(oci_url: str, tmp_path: Path) -> None:
    digest = publish_build(Store(oci_url), demo_recipe(tmp_path), tmp_path, "a")
    with FaultyProxy(registry_port(oci_url), corrupt_every=1, body_path="/blobs/") as proxy:
        url = proxied(oci_url, proxy)
        result = neuronbuild("verify", digest, "--cache", url, "--deep")
        assert result.returncode == 2, result.stderr
        assert "corrupt" in result.stderr or "do not match" in result.stderr
        pulled = neuronbuild(
            "pull", digest, "--cache", url, "--local-cache", str(tmp_path / "node")
        )
        assert pulled.returncode == 2, pulled.stderr
        # Read again once (bytes may change in transit), then the same wrong bytes: at rest.
        *_, last = pulled.stderr.strip().splitlines()
        assert "found sha256:" in last and "retrying" in pulled.stderr


def push_foreign(store: Store, tag: str, manifest: dict[str, object], config: bytes) -> None:
    """Push an OCI manifest that is not ours under ``tag`` (its config blob first)."""
    backend = store.backend
    assert isinstance(backend, RegistryBackend)
    backend.registry.upload_blob(sha256_digest(config), len(config), bytes_body(config))
    backend.registry.put_manifest(tag, json.dumps(manifest).encode())


def image_manifest(config: bytes, **extra: object) -> dict[str, object]:
    return {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha256_digest(config),
            "size": len(config),
        },
        "layers": [],
        **extra,
    }


def test_tags_of_other_tools_are_left_alone(oci_url: str, tmp_path: Path) -> None:
    store = Store(oci_url)
    digest = publish_build(store, demo_recipe(tmp_path), tmp_path, "a")
    push_foreign(store, "latest", image_manifest(b"{}"), b"{}")
    push_foreign(store, "v1.2", image_manifest(b"{}"), b"{}")
    assert store.refs() == {"remote-demo/latest": digest}
    assert store.manifest_digests() == [digest]


@pytest.mark.parametrize(
    ("hostile", "said"),
    [
        ("foreign", "not a neuronbuild units object"),
        ("other type", "not a neuronbuild units object"),
        ("other path", "holds another object"),
        ("huge", "larger than"),
        ("malformed record", "unit sha256:"),
    ],
)
@pytest.mark.slow
def test_a_tag_of_our_shape_that_is_not_ours_is_bad_store_data_exit_2(
    oci_url: str, tmp_path: Path, hostile: str, said: str
) -> None:
    store = Store(oci_url)
    digest = publish_build(store, demo_recipe(tmp_path), tmp_path, "a")
    backend = store.backend
    assert isinstance(backend, RegistryBackend)
    key = store.get_manifest(digest).units[0].key
    tag = backend.tag_of(store.layout.unit(key))
    ours = json.loads((backend.registry.get_manifest(tag) or (b"", ""))[0])
    config = b"{}"
    if hostile == "foreign":
        manifest = image_manifest(config)
    elif hostile == "other type":
        manifest = ours | {"artifactType": "application/vnd.example.thing.v1+json"}
    elif hostile == "other path":
        manifest = ours | {"annotations": ours["annotations"] | {"dev.neuronbuild.path": "x"}}
    elif hostile == "huge":
        manifest = ours | {"config": ours["config"] | {"size": 1 << 40}}
        manifest["config"].pop("data", None)
    else:
        config = b'{"not": "a record"'
        descriptor = {"digest": sha256_digest(config), "size": len(config)}
        manifest = ours | {"config": {**ours["config"], **descriptor}}
        manifest["config"].pop("data", None)
    push_foreign(store, tag, manifest, config)
    with pytest.raises(StoreDataInvalid, match=said):
        store.get_unit(key)
    result = neuronbuild("verify", digest, "--cache", oci_url)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr


def test_a_hostile_ref_tag_is_refused_when_refs_are_listed(oci_url: str, tmp_path: Path) -> None:
    store = Store(oci_url)
    publish_build(store, demo_recipe(tmp_path), tmp_path, "a")
    backend = store.backend
    assert isinstance(backend, RegistryBackend)
    tag = backend.tag_of(store.layout.ref("remote-demo", "latest"))
    push_foreign(store, tag, image_manifest(b"[]"), b"[]")
    result = neuronbuild("ls", "--cache", oci_url)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0 and tag in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "oci://ghcr.io",
        "oci://ghcr.io/",
        "oci://ghcr.io/Team/Cache",
        "oci+http:///team/cache",
        "oci://ghcr.io/team//cache",
    ],
)
def test_a_registry_url_without_a_valid_repository_is_refused_naming_the_form(url: str) -> None:
    with pytest.raises(UserError, match=r"HOST\[:PORT\]/REPOSITORY"):
        Store(url)


def test_credentials_come_from_the_docker_config_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``$DOCKER_CONFIG/config.json`` and ``$REGISTRY_AUTH_FILE`` name the basic credentials the
    token exchange sends (ORAS loads ``~/.docker/config.json`` itself)."""
    import base64

    docker, podman = tmp_path / "docker", tmp_path / "auth.json"
    docker.mkdir()
    secret = base64.b64encode(b"ci:s3cret").decode()
    (docker / "config.json").write_text(
        json.dumps({"auths": {"reg.example:5000": {"auth": secret}}})
    )
    podman.write_text(json.dumps({"auths": {"other.example": {"auth": "eDp5"}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(docker))
    monkeypatch.setenv("REGISTRY_AUTH_FILE", str(podman))
    from neuronbuild.transports.oci_registry import Registry

    first = Registry(parse_registry_url("oci://reg.example:5000/team/cache"))
    assert first.auth._basic_auth == secret
    second = Registry(parse_registry_url("oci://other.example/team/cache"))
    assert second.auth._basic_auth == "eDp5"


def many_blobs(count: int) -> Manifest:
    """A manifest of one unit naming ``count`` distinct blobs (their bytes are not stored)."""
    files = tuple(
        FileRecord(f"torch_compile_cache/f{i:06d}", sha256_digest(str(i).encode()), 1000 + i)
        for i in range(count)
    )
    key = sha256_digest(canonical_json({}))
    return Manifest("big", {}, (UnitRecord(key, {}, (), files, {}),))


@pytest.mark.slow
def test_a_manifest_whose_layers_a_registry_would_refuse_is_one_line_and_writes_nothing(
    oci_url: str,
) -> None:
    """A layer per blob: 40,000 blobs make an OCI manifest over the registry's 4 MiB, refused
    before a byte is sent (the registry would answer a bare HTTP 400 after the uploads)."""
    store = Store(oci_url)
    over = many_blobs(40_000)
    path = store.layout.manifest(over.digest)
    with pytest.raises(UserError) as raised:
        store.backend.create(path, over.to_bytes())
    message = str(raised.value)
    assert "\n" not in message and "40000 blobs as layers" in message, message
    assert "over the 4194304 a registry takes" in message and "nothing was written" in message
    assert not store.backend.exists(path)
    registry = Registry(parse_registry_url(oci_url))
    assert registry.blob_size(sha256_digest(over.to_bytes())) is None  # not even its config


@pytest.mark.slow
def test_a_refusal_listing_an_error_per_blob_names_the_first(oci_url: str) -> None:
    """The registry answers a manifest whose 20,000 blobs it lacks with an error per blob (over
    the 64 KiB of an answer read): the line still says which error it was."""
    store = Store(oci_url)
    lacking = many_blobs(20_000)
    with pytest.raises(StoreError, match="HTTP 400 MANIFEST_BLOB_UNKNOWN: blob unknown"):
        store.backend.create(store.layout.manifest(lacking.digest), lacking.to_bytes())


def test_a_probe_record_and_receipts_are_kept_beside_a_manifest_in_a_registry(
    oci_url: str, tmp_path: Path
) -> None:
    """``probe`` (issue 45) stores CI's answers and nodes' receipts beside the build, in a
    registry as in a folder; ``ls`` counts the receipts."""
    store = Store(oci_url)
    digest = publish_build(store, demo_recipe(tmp_path), tmp_path, "a")
    store.put_probe(digest, b'{"answers": []}')
    assert store.get_probe(digest) == b'{"answers": []}'
    names = [store.put_receipt(digest, f'{{"n": {i}}}'.encode()) for i in range(2)]
    assert store.receipt_names(digest) == sorted(names)
    listed = json.loads(neuronbuild("ls", "--cache", oci_url, "--json").stdout)
    assert listed["receipts"] == {digest: 2}
