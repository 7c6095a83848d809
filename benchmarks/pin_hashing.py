"""Preflight's pinned-bytes proof on a multi-GiB hub snapshot: cold (every shard hashed) against
cached (digests keyed by device, inode, size, mtime), through ``model_identity`` itself.

    python benchmarks/pin_hashing.py [--gib 3] [--shards 4] [--keep]

Builds ``--gib`` GiB of shards under a temporary hub cache laid out as the hub lays it out (blobs
named by sha256, snapshot links, an index), with its own digest cache, then times three calls:
cold, cached, and cached after one shard was touched (only that one is hashed again). "Cold" is
cold for the digest cache, not for the page cache: the shards were just written, so they are
likely in memory; a first read from disk is slower.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from tp2qual.candidate import Candidate
from tp2qual.serving.hub_snapshot import git_blob_sha1
from tp2qual.serving.identity import model_identity

REPO = "bench/Pinned-Model"
REVISION = "0123456789abcdef0123456789abcdef01234567"
BLOCK = 1 << 24


def build(hub: Path, gib: float, shards: int) -> Path:
    repo = hub / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / REVISION
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    per = int(gib * (1 << 30)) // shards
    names = [f"model-{i + 1:05d}-of-{shards:05d}.safetensors" for i in range(shards)]
    for n, name in enumerate(names):
        seed = os.urandom(BLOCK)  # a fresh block per shard: no two shards share a digest
        tmp = repo / "blobs" / "tmp"
        digest = hashlib.sha256()
        with tmp.open("wb") as fh:
            for k in range(per // BLOCK):
                block = seed[k % 7 :] + seed[: k % 7] + bytes([n])
                block = block[:BLOCK]
                fh.write(block)
                digest.update(block)
        tmp.rename(repo / "blobs" / digest.hexdigest())
        (snapshot / name).symlink_to(Path("../../blobs") / digest.hexdigest())
    index = {"weight_map": {f"w{i}": name for i, name in enumerate(names)}}
    blob = repo / "blobs" / "index"
    blob.write_text(json.dumps(index))
    address = git_blob_sha1(blob)
    blob.rename(repo / "blobs" / address)
    (snapshot / "model.safetensors.index.json").symlink_to(Path("../../blobs") / address)
    return snapshot


def timed(candidate: Candidate) -> tuple[float, dict]:
    began = time.perf_counter()
    facts = model_identity(candidate)
    return time.perf_counter() - began, facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=3.0)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="leave the folder (path printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tp2qual-pin-bench-"))
    os.environ["TP2QUAL_CACHE"] = str(work / "tp2qual-cache")  # this run's digest cache only
    snapshot = build(work / "hub", args.gib, args.shards)
    size = sum(p.resolve().stat().st_size for p in snapshot.iterdir())
    spec = {"name": "bench", "model": {"repo": REPO, "revision": REVISION, "served_name": "b",
                                       "hf_cache": str(work / "hub")}}  # fmt: skip
    candidate = Candidate(work / "bench.toml", spec)
    print(f"snapshot: {len(list(snapshot.iterdir()))} files, {size / (1 << 30):.2f} GiB in {work}")
    for label, before in (("cold", None), ("cached", None), ("one shard touched", "touch")):
        if before == "touch":
            shard = next(snapshot.glob("*.safetensors")).resolve()
            os.utime(shard)  # new mtime: a different cache key, so it is hashed again
        seconds, facts = timed(candidate)
        print(
            f"{label:<18} {seconds:8.3f} s  hashed {facts['digests_hashed']}, "
            f"from cache {facts['digests_cached']}"
        )
    if not args.keep:
        for path in sorted(work.rglob("*"), reverse=True):
            path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
        work.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
