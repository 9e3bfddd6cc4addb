"""Figures for OCI registry stores (run with .venv/bin/python bench/oci_transfer.py
[--shapes 200x2.5 4x125] [--repeat N]).

Against the CNCF distribution registry on 127.0.0.1 (Debian's ``docker-registry``, started by
the tests' helper ``tests/lib/registry.py``), for each shape ``COUNTxMB`` (blobs x MB each), a
fresh registry, one repository per client:

- push: neuronbuild's (``copy_manifest`` from a folder store, as ``push`` does, into an
  ``oci+http://`` store: each blob's presence checked, then one streamed ``PUT``, 8 at once)
  against the ORAS Python SDK's ``upload_blob`` (the library neuronbuild uses for credentials),
  8 threads, given the digests, into an empty repository;
- pull: neuronbuild's (``copy_manifest`` into an empty folder store, 8 jobs, every byte's sha256
  checked) against ORAS's ``download_blob`` and plain ``requests`` streamed GETs (1 MiB reads),
  8 threads each, nothing verified;
- the floor, on the bytes neuronbuild pulled: one sha256 pass and a plain local copy.

Ratios are of throughput, neuronbuild / plain (plain seconds / neuronbuild seconds): above 1,
neuronbuild is faster. Each figure is the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository, for tests.lib
from s3_pull import random_file, timed

from neuronbuild.orchestrate.compile import ingest
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest
from neuronbuild.store.transfer import copy_manifest
from tests.lib.registry import start_registry

REPO = Path(__file__).resolve().parent.parent
JOBS = 8


def oras_client(host: str) -> object:
    import oras.provider

    return oras.provider.Registry(hostname=host, insecure=True)


def oras_upload(host: str, repository: str, files: list[tuple[Path, str, int]]) -> None:
    client = oras_client(host)
    container = client.get_container(f"{host}/{repository}")  # type: ignore[attr-defined]

    def one(item: tuple[Path, str, int]) -> None:
        path, digest, size = item
        layer = {"mediaType": "application/octet-stream", "digest": digest, "size": size}
        client.upload_blob(str(path), container, layer).raise_for_status()  # type: ignore[attr-defined]

    with ThreadPoolExecutor(JOBS) as pool:
        list(pool.map(one, files))


def oras_download(host: str, repository: str, digests: list[str], dest: Path) -> None:
    client = oras_client(host)
    container = client.get_container(f"{host}/{repository}")  # type: ignore[attr-defined]
    with ThreadPoolExecutor(JOBS) as pool:
        list(
            pool.map(
                lambda d: client.download_blob(container, d, str(dest / d[7:])),  # type: ignore[attr-defined]
                digests,
            )
        )


def requests_download(host: str, repository: str, digests: list[str], dest: Path) -> None:
    import requests

    session = requests.Session()
    adapter = requests.adapters.HTTPAdapter(pool_maxsize=JOBS)
    session.mount("http://", adapter)

    def one(digest: str) -> None:
        with session.get(f"http://{host}/v2/{repository}/blobs/{digest}", stream=True) as r:
            r.raise_for_status()
            with open(dest / digest[7:], "wb") as f:
                for block in r.iter_content(1 << 20):
                    f.write(block)

    with ThreadPoolExecutor(JOBS) as pool:
        list(pool.map(one, digests))


def figures(work: Path, count: int, size: int, repeat: int) -> None:
    server = start_registry()
    try:
        recipe = load_recipe(REPO / "recipes" / "cpu-tiny-llama.yaml")
        [unit] = build_plan(recipe).units
        rels = [Path(f"src/{i:05d}.bin") for i in range(count)]
        for rel in rels:
            random_file(work / rel, size)
        mb = count * size / 1e6
        stage = Store(str(work / "stage"), create=True)
        record = ingest(stage, unit, work, rels, {})
        digest = stage.put_manifest(Manifest(recipe.name, recipe.canonical(), (record,)))
        ours_up = float("inf")
        for turn in range(repeat):
            remote = Store(f"oci+http://{server.host}/bench/nb{turn}")
            pushed = timed(lambda r=remote: copy_manifest(stage, r, digest, jobs=JOBS))
            ours_up = min(ours_up, pushed)
        files = [(work / rel, f.digest, f.size) for rel, f in zip(rels, record.files, strict=True)]
        oras_up = float("inf")
        for turn in range(repeat):
            repository = f"bench/oras{turn}"
            oras_up = min(oras_up, timed(lambda r=repository: oras_upload(server.host, r, files)))
        shutil.rmtree(work / "src")
        print(
            f"{count} blobs x {size / 1e6:g} MB = {mb:.0f} MB, distribution registry on "
            f"127.0.0.1, {os.cpu_count()} cores, best of {repeat}:"
        )
        print(f"  {'':34} {'seconds':>8} {'MB/s':>7}  neuronbuild/plain")
        print(f"  {'push, neuronbuild (8 jobs)':34} {ours_up:8.2f} {mb / ours_up:7.0f}")
        print(
            f"  {'push, ORAS upload_blob (8 thr.)':34} {oras_up:8.2f} {mb / oras_up:7.0f}"
            f"  {oras_up / ours_up:.2f}"
        )
        ours = float("inf")
        for _ in range(repeat):
            shutil.rmtree(work / "node", ignore_errors=True)
            node = Store(str(work / "node"), create=True)
            ours = min(ours, timed(lambda n=node: copy_manifest(remote, n, digest, jobs=JOBS)))
        print(f"  {'pull, neuronbuild (8 jobs, checked)':34} {ours:8.2f} {mb / ours:7.0f}")
        digests = [f.digest for f in record.files]
        repository = remote.url.split("/", 3)[3]
        for name, fetch in (
            ("pull, ORAS download_blob", oras_download),
            ("pull, requests GET", requests_download),
        ):
            seconds = float("inf")
            for _ in range(repeat):
                dest = work / "plain"
                dest.mkdir()
                took = timed(lambda f=fetch, d=dest: f(server.host, repository, digests, d))
                seconds = min(seconds, took)
                if sum(p.stat().st_size for p in dest.iterdir()) != count * size:
                    raise RuntimeError(f"{name} wrote other than {count * size} bytes")
                shutil.rmtree(dest)
            line = f"{seconds:8.2f} {mb / seconds:7.0f}  {seconds / ours:.2f}"
            print(f"  {name + ' (8 threads)':34} {line}", flush=True)
        pulled = [Path(node.layout.blob(d)) for d in digests]

        def sha256_all() -> None:
            for path in pulled:
                with open(path, "rb") as f:
                    hashlib.file_digest(f, "sha256")

        hashing = timed(sha256_all)
        (work / "copy").mkdir()
        copying = timed(lambda: [shutil.copyfile(b, work / "copy" / b.name) for b in pulled])
        print(
            f"  floor, same bytes, 1 core each: sha256 {hashing:.2f} s, local copy "
            f"{copying:.2f} s; neuronbuild pull = {ours / (hashing + copying):.2f}x their sum",
            flush=True,
        )
    finally:
        for leftover in ("node", "src", "copy", "plain", "stage"):
            shutil.rmtree(work / leftover, ignore_errors=True)
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["200x2.5", "4x125"], help="COUNTxMB")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="neuronbuild-bench-oci-") as work:
        for shape in args.shapes:
            count, _, each = shape.partition("x")
            figures(Path(work), int(count), int(float(each) * 1e6), args.repeat)


if __name__ == "__main__":
    main()
