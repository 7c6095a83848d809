"""Prove a Hugging Face cache snapshot holds the pinned revision's bytes, by content address.

The hub cache keeps each file once under ``blobs/``, named by its content: the sha256 of the
bytes for an LFS file (weights), the git blob sha1 (``sha1("blob <size>\\0" + bytes)``) for a small
one; ``snapshots/<revision>/`` holds links into it. So every file of the snapshot is checked
against its own name, and the shards against ``model.safetensors.index.json``. Hashing tens of GB
takes minutes, so each digest is cached by (device, inode, size, mtime): a file rewritten in
place gets a new mtime and is hashed again. The facts say which digests came from the cache.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tp2qual.evidence.layout import atomic_write

SHA256 = re.compile(r"[0-9a-f]{64}")
GIT_SHA1 = re.compile(r"[0-9a-f]{40}")
BLOCK = 1 << 24


class SnapshotMismatch(ValueError):
    """The snapshot's bytes are not what their content addresses say, or a shard is missing."""


@dataclass
class DigestCache:
    """sha256 of files, kept in a JSON file across runs, keyed by (device, inode, size, mtime)."""

    path: Path | None
    entries: dict[str, str] = field(default_factory=dict)
    hits: int = 0
    hashed: int = 0
    hashed_bytes: int = 0

    @classmethod
    def load(cls, path: Path | None) -> DigestCache:
        try:
            body = json.loads(path.read_text()) if path else {}
        except (OSError, ValueError):
            body = {}  # unreadable: every file is hashed again, which is only slower
        entries = body.get("sha256") if isinstance(body, dict) else None
        return cls(path, dict(entries) if isinstance(entries, dict) else {})

    def sha256(self, file: Path) -> tuple[str, bool]:
        """(digest, whether it came from the cache)."""
        stat = file.stat()
        key = f"{stat.st_dev}:{stat.st_ino}:{stat.st_size}:{stat.st_mtime_ns}"
        if key in self.entries:
            self.hits += 1
            return self.entries[key], True
        digest = hashlib.sha256()
        with file.open("rb") as fh:
            while block := fh.read(BLOCK):
                digest.update(block)
        self.entries[key] = digest.hexdigest()
        self.hashed += 1
        self.hashed_bytes += stat.st_size
        return self.entries[key], False

    def save(self) -> None:
        if self.path is not None and self.hashed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps({"sha256": self.entries}, sort_keys=True) + "\n")


def git_blob_sha1(file: Path) -> str:
    """The id git (and the hub cache, for a non-LFS file) gives these bytes."""
    data = file.read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def check_snapshot(snapshot: Path, digests: DigestCache) -> dict[str, Any]:
    """Every file of ``snapshot`` resolved to its blob and checked against the blob's name;
    the shard set against the index. Raises SnapshotMismatch naming the file."""
    links = sorted(p for p in snapshot.rglob("*") if p.is_symlink() or p.is_file())
    if not links:
        raise SnapshotMismatch(f"{snapshot} holds no files: no pinned bytes to prove")
    files = []
    for link in links:
        rel = link.relative_to(snapshot).as_posix()
        blob = link.resolve()
        if not blob.is_file():
            raise SnapshotMismatch(f"{rel} points at {blob}, which is not on disk")
        if blob.parent.name != "blobs":
            raise SnapshotMismatch(
                f"{rel} is not a link into the cache's blobs/: its content address is unknown"
            )
        files.append(_checked(rel, blob, digests))
    _check_shards(snapshot, {f["file"] for f in files})
    return {
        "files": files,
        "content_addresses": {f["file"]: f["address"] for f in files},
        "weight_files": sum(f["file"].endswith(".safetensors") for f in files),
        "weight_bytes": sum(f["bytes"] for f in files if f["file"].endswith(".safetensors")),
    }


def _checked(rel: str, blob: Path, digests: DigestCache) -> dict[str, Any]:
    name, size = blob.name, blob.stat().st_size
    if SHA256.fullmatch(name):  # an LFS file: its sha256
        digest, cached = digests.sha256(blob)
        address = f"sha256:{digest}"
    elif GIT_SHA1.fullmatch(name):  # a small file kept in git: its blob id
        digest, cached = git_blob_sha1(blob), False
        address = f"git-sha1:{digest}"
    else:
        raise SnapshotMismatch(f"{rel}: blob name {name!r} is not a content address")
    if digest != name:
        raise SnapshotMismatch(
            f"{rel}: blob {name} holds bytes whose digest is {digest}: not the pinned revision's"
        )
    return {"file": rel, "address": address, "bytes": size, "cached": cached}


def _check_shards(snapshot: Path, files: set[str]) -> None:
    present = {f for f in files if f.endswith(".safetensors")}
    index = snapshot / "model.safetensors.index.json"
    if not index.exists():
        if not present and not any(f.endswith((".bin", ".gguf", ".pt")) for f in files):
            raise SnapshotMismatch(f"{snapshot} holds no weight file")
        return
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        named = {str(v) for v in weight_map.values()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SnapshotMismatch(f"model.safetensors.index.json has no weight_map: {exc}") from None
    if missing := sorted(named - present):
        raise SnapshotMismatch(f"the index names shards not in the snapshot: {missing}")
    if extra := sorted(present - named):
        raise SnapshotMismatch(f"shards in the snapshot the index does not name: {extra}")
