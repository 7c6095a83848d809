"""Prove a Hugging Face cache snapshot holds the pinned revision's bytes, by content address.

The hub cache keeps each file once under ``blobs/``, named by its content: the sha256 of the
bytes for an LFS file (weights), the git blob sha1 (``sha1("blob <size>\\0" + bytes)``) for a small
one; ``snapshots/<revision>/`` holds links into it. So every file of the snapshot is checked
against its own name, and the shards against ``model.safetensors.index.json``. Hashing tens of GB
takes minutes, so each digest is cached by (device, inode, size, mtime): a file rewritten in
place gets a new mtime and is hashed again. The facts say which digests came from the cache.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tp2qual.artifacts.layout import atomic_write
from tp2qual.checks import content_address, preflight


class SnapshotMismatch(ValueError):
    """The snapshot's bytes are not what their content addresses say, or a shard is missing."""

    def __init__(self, message: str, facts: dict[str, Any] | None = None):
        super().__init__(message)
        self.facts = facts or {}


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
        self.remember(key, content_address.file_sha256(str(file)), stat.st_size)
        return self.entries[key], False

    def known(self, prefix: str) -> dict[str, str]:
        """The digests kept under keys that start with ``prefix`` (one volume's), the prefix
        cut off: what a helper container may take instead of hashing again."""
        return {k[len(prefix) :]: v for k, v in self.entries.items() if k.startswith(prefix)}

    def remember(self, key: str, digest: str, size: int) -> None:
        """A digest just computed (here or in a helper container), kept for the next run."""
        self.entries[key] = digest
        self.hashed += 1
        self.hashed_bytes += size

    def save(self) -> None:
        if self.path is not None and self.hashed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps({"sha256": self.entries}, sort_keys=True) + "\n")


def git_blob_sha1(file: Path) -> str:
    """The id git (and the hub cache, for a non-LFS file) gives these bytes."""
    return content_address.file_git_sha1(str(file))


def snapshot_facts(snapshot: Path, digests: DigestCache) -> dict[str, Any]:
    """What the snapshot holds: each file's link, the blob it resolves to and the digest of the
    blob's bytes (hashing stops at the first file whose record fails ``file_problem``), and
    the shards the index names. Judged by ``checks.preflight.snapshot_problem``."""
    links = sorted(p for p in snapshot.rglob("*") if p.is_symlink() or p.is_file())
    files: list[dict[str, Any]] = []
    for link in links:
        files.append(_entry(link.relative_to(snapshot).as_posix(), link.resolve(), digests))
        if preflight.file_problem(files[-1]):
            break
    return {"snapshot": str(snapshot), "files": files, "index": _index(snapshot)}


def check_snapshot(snapshot: Path, digests: DigestCache) -> dict[str, Any]:
    """Every file of ``snapshot`` resolved to its blob and checked against the blob's name;
    the shard set against the index. Raises SnapshotMismatch naming the file (its ``facts``:
    what was found)."""
    return judged_snapshot(snapshot_facts(snapshot, digests))


def judged_snapshot(facts: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's facts (read on the host or in a volume) judged by
    ``checks.preflight.snapshot_problem``, with its content addresses and weight totals added.
    Raises SnapshotMismatch naming the file."""
    if problem := preflight.snapshot_problem(facts):
        raise SnapshotMismatch(problem, facts)
    files = facts["files"]
    weights = [f for f in files if f["file"].endswith(".safetensors")]
    return {
        **facts,
        "content_addresses": preflight.snapshot_addresses(files),
        "weight_files": len(weights),
        "weight_bytes": sum(f["bytes"] for f in weights),
    }


def _entry(rel: str, blob: Path, digests: DigestCache) -> dict[str, Any]:
    """One file's record: where its link leads, and the digest of the bytes there when the
    blob's name is a content address (sha256 for LFS files, the git blob id otherwise)."""
    entry: dict[str, Any] = {"file": rel, "target": str(blob), "on_disk": blob.is_file()}
    entry |= {"in_blobs": blob.parent.name == "blobs", "blob": blob.name}
    if not (entry["on_disk"] and entry["in_blobs"]):
        return entry
    kind = content_address.address_kind(blob.name)
    cached = False
    if kind == "sha256":
        digest, cached = digests.sha256(blob)
    elif kind == "git-sha1":
        digest = git_blob_sha1(blob)
    else:
        return entry
    address = f"{kind}:{digest}"
    return entry | {"digest": digest, "address": address, "bytes": blob.stat().st_size,
                    "cached": cached}  # fmt: skip


def _index(snapshot: Path) -> dict[str, Any]:
    """The shards ``model.safetensors.index.json`` names, as read (its bytes are proven with
    the other files, by their git blob id)."""
    index = snapshot / preflight.INDEX
    return index_facts(index.read_text() if index.exists() else None)


def index_facts(text: str | None) -> dict[str, Any]:
    """The shards an index's text names (None: no index), as ``shard_problem`` reads them."""
    if text is None:
        return {"present": False}
    try:
        weight_map = json.loads(text)["weight_map"]
        shards = sorted({str(v) for v in weight_map.values()})
        return {"present": True, "error": None, "shards": shards}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        return {"present": True, "error": str(exc)}
