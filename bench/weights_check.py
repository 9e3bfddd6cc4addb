"""What ``serve``'s weights check costs a node, against the sha256 floor of the same files measured
in the same run (run with .venv/bin/python bench/weights_check.py [--mb 2000] [--files 4]).

A model folder of ``--files`` random weight files (``--mb`` MB in all, as a sharded checkpoint),
digested as ``serve`` checks them (:func:`neuronbuild.node.weights.digest_weights`):

- floor: one sha256 pass over the same files on one core (``hashlib.file_digest``, what
  ``sha256sum`` does);
- first start: no record on this host, every file hashed (on the host's cores, largest first);
- repeat: the host's record holds every file's stat, nothing hashed.

The bytes are in the page cache for every timing (they were just written, and read again by the
floor first), and no dirty page is left to write back (``sync`` before each timing).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from node_prepare import sha256_all, timed  # this folder's: the same floor, measured alike


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=2000, help="MB of weights in all")
    parser.add_argument("--files", type=int, default=4, help="weight files")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nb-weights-") as tmp:
        os.environ["XDG_CACHE_HOME"] = str(Path(tmp) / "cache")  # this run's record alone
        from neuronbuild.node.weights import checked_path, digest_weights

        folder = Path(tmp) / "model"
        folder.mkdir()
        each = args.mb * 1_000_000 // args.files
        paths = []
        for i in range(args.files):
            path = folder / f"model-{i + 1:05d}-of-{args.files:05d}.safetensors"
            with open(path, "wb") as f:
                for _ in range(each // (1 << 24)):
                    f.write(os.urandom(1 << 24))
                f.write(os.urandom(each % (1 << 24)))
            paths.append(path)
        sha256_all(paths)  # into the page cache, for every timing alike
        floor = timed(lambda: sha256_all(paths))
        first = timed(lambda: digest_weights(folder))
        assert checked_path(folder).is_file()
        repeat = timed(lambda: digest_weights(folder))
        cores = os.cpu_count()
        print(f"weights check of {args.files} files, {args.mb} MB, {cores} cores:")
        print(f"  floor: sha256 of the same files on one core {floor:.2f} s")
        print(f"  first start (every file hashed): {first:.2f} s = {first / floor:.2f}x")
        print(f"  repeat (the host's record holds): {repeat:.4f} s = {repeat / floor:.4f}x")


if __name__ == "__main__":
    main()
