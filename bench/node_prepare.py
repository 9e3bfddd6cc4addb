"""What a node pays in bytes before vLLM starts, against the floor measured in the same run
(run with .venv/bin/python bench/node_prepare.py [--mb 1000] [--blobs 200]).

A manifest of ``--blobs`` random blobs (``--mb`` MB in all) in a folder store as the remote and
an empty local tier, through the byte path of ``serve`` (``TieredStore.fill``, then ``lay_out``):

- fresh node: fetch into the local tier, verify, lay out, as ``serve`` does it (no fsync per
  blob: :meth:`~neuronbuild.store.tiered.TieredStore.skip_blob_fsync`); floor: one sha256 pass
  over the bytes plus a plain copy of them (``shutil.copyfile``), each on one core, while
  neuronbuild's path runs 8 threads (so on many cores it may beat this floor, as the goal asks);
- the same with an fsync per blob (as ``pull`` keeps them), against a second floor: sha256
  plus a copy fsynced per file;
- the node already holds the blobs (a later process): the first lay-out; floor: sha256;
- the node already laid it out: a repeat (the stamp alone).

Every run starts with the bytes in the page cache (they were just written), as a floor that
reads them does too, and with no dirty page left to write back (``sync`` before each timing).
Both floors are printed: sha256 with the plain copy, and with the copy fsynced per blob. Each is
the median of ``--rounds`` rounds, each round in another order: on the VMs measured, a write of
a gigabyte soon after others takes several times as long as the first (0.34 s, then 1.36 s, then
2.95 s, each after a ``sync``), so whichever ran last would pay it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from neuronbuild.node.materialize import lay_out
from neuronbuild.orchestrate.compile import ingest
from neuronbuild.plan import build_plan
from neuronbuild.recipe import load_recipe
from neuronbuild.store.cas import Store
from neuronbuild.store.records import Manifest
from neuronbuild.store.tiered import TieredStore

REPO = Path(__file__).resolve().parent.parent


def timed(work: Callable[[], object]) -> float:
    """Seconds ``work`` takes, the page cache settled first (``sync``: no timing pays the
    write-back of the dirty pages an earlier step left, as the issue 45 measurement found the
    first floor's copy paying a gigabyte of them)."""
    os.sync()
    start = time.monotonic()
    work()
    return time.monotonic() - start


def sha256_all(paths: list[Path]) -> None:
    for path in paths:
        with open(path, "rb") as f:
            hashlib.file_digest(f, "sha256")


def durable_copy(src: Path, dst: Path) -> None:
    """A plain copy made durable as the local tier makes a blob: fsync of the file, then of
    its folder."""
    shutil.copyfile(src, dst)
    with open(dst, "rb") as f:
        os.fsync(f.fileno())
    fd = os.open(dst.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=1000, help="bytes in all, MB (default 1000)")
    parser.add_argument("--blobs", type=int, default=200, help="blobs (default 200)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    args = parser.parse_args()
    size = args.mb * 1_000_000 // args.blobs
    work = Path(tempfile.mkdtemp(prefix="neuronbuild-node-bench-"))
    try:
        recipe = load_recipe(REPO / "recipes" / "cpu-tiny-llama.yaml")
        [unit] = build_plan(recipe).units
        rels = [Path(f"src/{i:04d}.bin") for i in range(args.blobs)]
        for rel in rels:
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            (work / rel).write_bytes(os.urandom(size))
        remote = Store(str(work / "remote"), create=True)
        record = ingest(remote, unit, work, rels, {})
        manifest = Manifest(recipe.name, recipe.canonical(), (record,))
        digest = remote.put_manifest(manifest)
        blobs = [Path(remote.layout.blob(f.digest)) for f in record.files]

        def plain(name: str) -> None:
            (work / name).mkdir()
            for b in blobs:
                shutil.copyfile(b, work / name / b.name)

        def durable_floor(name: str) -> None:
            (work / name).mkdir()
            for b in blobs:
                durable_copy(b, work / name / b.name)

        def fresh(name: str, durable: bool = False) -> None:
            tiers = TieredStore(Store(str(work / name / "local"), create=True), remote)
            if not durable:
                tiers.skip_blob_fsync()  # as serve fetches
            tiers.fill(digest)
            lay_out(manifest, digest, tiers, work / name / "node")

        steps: dict[str, Callable[[str], None]] = {
            "copy": plain,
            "durable copy": durable_floor,
            "fresh": fresh,
            "fresh, fsynced": lambda name: fresh(name, durable=True),
        }
        seconds: dict[str, list[float]] = {name: [] for name in steps}
        hashes = []
        for r in range(args.rounds):  # each round in another order: none always goes last
            hashes.append(timed(lambda: sha256_all(blobs)))
            order = list(steps)[r % len(steps) :] + list(steps)[: r % len(steps)]
            for name in order:
                out = f"{name}-{r}".replace(" ", "-").replace(",", "")
                seconds[name].append(timed(lambda: steps[name](out)))  # noqa: B023
                shutil.rmtree(work / out)
        median = {name: statistics.median(v) for name, v in seconds.items()}
        hashing = statistics.median(hashes)
        floor, durable = hashing + median["copy"], hashing + median["durable copy"]
        fresh("held")
        held = TieredStore(Store(str(work / "held" / "local")), remote)  # a later process
        held_s = timed(lambda: lay_out(manifest, digest, held, work / "node2"))
        repeat_s = timed(lambda: lay_out(manifest, digest, held, work / "node2"))
        total = args.blobs * size
        print(
            f"node prepare of {args.blobs} blobs, {total / 1e6:.0f} MB, {os.cpu_count()} cores "
            f"(medians of {args.rounds} rounds):"
        )
        print(
            f"  floor: sha256 {hashing:.2f} s + plain copy {median['copy']:.2f} s = {floor:.2f} s"
        )
        print(
            f"  fresh node (fetch + verify + lay out, as serve: no fsync per blob): "
            f"{median['fresh']:.2f} s = {median['fresh'] / floor:.2f}x"
        )
        print(
            f"  fresh node with an fsync per blob (as pull keeps them): "
            f"{median['fresh, fsynced']:.2f} s = {median['fresh, fsynced'] / floor:.2f}x; against "
            f"sha256 + a copy fsynced per file {durable:.2f} s: "
            f"{median['fresh, fsynced'] / durable:.2f}x"
        )
        print(f"  blobs held, first lay-out: {held_s:.2f} s = {held_s / hashing:.2f}x sha256")
        print(f"  repeat lay-out (stamp): {repeat_s:.3f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
