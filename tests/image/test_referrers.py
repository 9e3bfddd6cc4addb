"""Attestations as OCI referrers on a registry that does not index them itself (distribution
2.8, on loopback): pushes racing on the fallback referrers index each end listed in it."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from neuronbuild.digest import hex_of, sha256_digest
from neuronbuild.errors import StoreError
from neuronbuild.image import referrers
from neuronbuild.transports.oci_registry import Registry, parse_registry_url
from tests.store.test_oci import oci_url, registry_root

__all__ = ["oci_url", "registry_root"]  # the fixtures this module uses


@pytest.mark.slow
def test_attestations_pushed_at_once_each_end_in_the_referrers_index(
    oci_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four pushes read the index together and each writes it back 0.3 s later (a slow
    registry): each one's first write drops the others', and its check writes it again."""
    client = Registry(parse_registry_url(oci_url))
    image = sha256_digest(b"an image manifest")
    envelopes = {f"key{i}": json.dumps({"attestation": i}).encode() for i in range(4)}
    read = client.get_manifest
    index_reads = 0

    def slow_read(reference: str, media_type: str = referrers.MANIFEST_MEDIA_TYPE) -> Any:
        nonlocal index_reads
        got = read(reference, media_type)
        if reference.startswith("sha256-"):
            index_reads += 1
            time.sleep(0.3)
        return got

    monkeypatch.setattr(client, "get_manifest", slow_read)
    together = threading.Barrier(len(envelopes))

    def push(keyid: str) -> int:
        together.wait()
        return referrers.push_attestations(
            client,
            image,
            100,
            sha256_digest(b"neuronbuild manifest"),
            [(keyid, envelopes[keyid], "manifest")],
        )

    with ThreadPoolExecutor(len(envelopes)) as pool:
        assert list(pool.map(push, envelopes)) == [1, 1, 1, 1]
    listed: list[Any] = referrers._listed(client, f"sha256-{hex_of(image)}")
    keyids = sorted(m["annotations"][referrers.KEYID_ANNOTATION] for m in listed)
    assert keyids == sorted(envelopes), keyids
    assert index_reads > 2 * len(envelopes)  # each push read it again after writing


@pytest.mark.parametrize(
    "body", [b'{"manifests": 5}', b"[1, 2]", b"not json", b'{"manifests": {"a": 1}}']
)
def test_a_malformed_referrers_index_is_one_store_error(body: bytes) -> None:
    """Issue 43 item 8: ``{"manifests": 5}`` printed a traceback."""

    class Answers:
        where = parse_registry_url("oci://reg.example/team/images")

        def get_manifest(self, reference: str, media_type: str) -> tuple[bytes, str]:
            return body, "sha256:" + "0" * 64

    with pytest.raises(StoreError, match="the referrers index sha256-ab is not an image index"):
        referrers._listed(Answers(), "sha256-ab")  # type: ignore[arg-type]
