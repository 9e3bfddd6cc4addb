"""Figures for remote stores (run with .venv/bin/python bench/s3_pull.py).

Against moto's S3 server on 127.0.0.1: pull throughput of a manifest of 200 blobs (500 MB in all)
with ``neuronbuild pull``'s code path versus a plain s3fs ``get`` of the same objects, in one run;
and seconds to check 1,000 blobs for presence.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from loopback_s3 import start_s3

from neuronbuild.build.compile import ingest
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, Manifest
from neuronbuild.store.transfer import copy_manifest

REPO = Path(__file__).resolve().parent.parent
BLOBS, BLOB_BYTES, PRESENCE = 200, 2_500_000, 1000


def main() -> None:
    server = start_s3("bench")
    import s3fs

    fs = s3fs.S3FileSystem()
    work = Path(tempfile.mkdtemp(prefix="neuronbuild-s3-bench-"))
    try:
        recipe = load_recipe(REPO / "recipes" / "cpu-tiny-llama.yaml")
        [unit] = build_plan(recipe).units
        rels = [Path(f"blobs-src/{i:03d}.bin") for i in range(BLOBS)]
        for rel in rels:
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(os.urandom(BLOB_BYTES))
        remote = Store("s3://bench/store")
        record = ingest(remote, unit, work, rels, {})
        digest = remote.put_manifest(Manifest(recipe.name, recipe.canonical(), (record,)))
        total = BLOBS * BLOB_BYTES

        start = time.monotonic()
        copy_manifest(remote, Store(str(work / "node"), create=True), digest, jobs=8)
        ours = time.monotonic() - start
        paths = [remote.layout.blob(f.digest) for f in record.files]
        start = time.monotonic()
        fs.get(paths, str(work / "plain") + "/")
        plain = time.monotonic() - start
        print(f"pull of {BLOBS} blobs, {total / 1e6:.0f} MB (verified, sha256 of every byte):")
        print(f"  neuronbuild pull: {ours:.2f} s, {total / 1e6 / ours:.0f} MB/s")
        print(f"  plain s3fs get:   {plain:.2f} s, {total / 1e6 / plain:.0f} MB/s")
        print(f"  ratio neuronbuild / plain throughput: {plain / ours:.2f}")

        small = []
        for i in range(PRESENCE):
            data = f"blob {i}".encode()
            src = work / "small"
            src.write_bytes(data)
            d, size = remote.put_file(src)
            small.append(FileRecord(f"f{i}", d, size))
        start = time.monotonic()
        missing = remote.missing_blobs(small)
        seconds = time.monotonic() - start
        print(f"presence check of {PRESENCE} blobs: {seconds:.2f} s ({len(missing)} missing)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    main()
