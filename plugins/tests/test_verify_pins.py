"""Preflight's model pin proves the bytes: a small real Hugging Face cache, laid out as the hub
lays it out (blobs named by content, snapshot links into them), hashed for real.

``hub_snapshot`` builds one (other self-tests that need a resolvable pin use it too).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate
from tp2qual.exceptions import PinMismatch
from tp2qual.serving.hub_snapshot import DigestCache, git_blob_sha1
from tp2qual.serving.identity import model_identity

REPO = "example/Tiny-Model"
REVISION = "0123456789abcdef0123456789abcdef01234567"
SHARDS = {
    "model-00001-of-00002.safetensors": os.urandom(300_000),
    "model-00002-of-00002.safetensors": os.urandom(200_000),
}
INDEX = {
    "weight_map": {
        "a.weight": "model-00001-of-00002.safetensors",
        "b.weight": "model-00002-of-00002.safetensors",
    }
}


def hub_snapshot(
    hub: Path,
    repo: str = REPO,
    revision: str = REVISION,
    files: dict[str, bytes] | None = None,
    lfs: tuple[str, ...] = (".safetensors",),
) -> Path:
    """A hub cache under ``hub``: LFS files (names ending in ``lfs``) as ``blobs/<sha256>``, the
    rest as ``blobs/<git blob sha1>``, and ``snapshots/<revision>/<file>`` relative links."""
    repo_dir = hub / ("models--" + repo.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / revision
    (repo_dir / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    contents = (
        files
        if files is not None
        else {
            **SHARDS,
            "model.safetensors.index.json": json.dumps(INDEX).encode(),
            "config.json": b'{"model_type": "llama"}',
        }
    )
    for name, data in contents.items():
        blob = repo_dir / "blobs" / "tmp"
        blob.write_bytes(data)
        large = name.endswith(lfs)
        address = hashlib.sha256(data).hexdigest() if large else git_blob_sha1(blob)
        blob.rename(repo_dir / "blobs" / address)
        (snapshot / name).symlink_to(Path("../../blobs") / address)
    return snapshot


def candidate(hub: Path) -> Candidate:
    spec = {
        "name": "tiny",
        "model": {"repo": REPO, "revision": REVISION, "served_name": "tiny", "hf_cache": str(hub)},
    }
    return Candidate(hub / "tiny.toml", spec)


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The digest cache of these tests only."""
    monkeypatch.setenv("TP2QUAL_CACHE", str(tmp_path / "tp2qual-cache"))
    return tmp_path / "tp2qual-cache" / "digests.json"


def test_an_intact_snapshot_is_proven_by_its_content_addresses(tmp_path: Path) -> None:
    snapshot = hub_snapshot(tmp_path / "hub")
    facts = model_identity(candidate(tmp_path / "hub"))
    addresses = facts["content_addresses"]
    shard = "model-00001-of-00002.safetensors"
    assert addresses[shard] == "sha256:" + hashlib.sha256(SHARDS[shard]).hexdigest()
    assert addresses["config.json"].startswith("git-sha1:")
    assert (facts["weight_files"], facts["weight_bytes"]) == (2, 500_000)
    assert facts["resolved_revision"] == snapshot.name
    assert (facts["digests_hashed"], facts["digests_cached"]) == (2, 0)


def test_the_second_run_uses_cached_digests_and_says_so(tmp_path: Path, own_cache: Path) -> None:
    hub_snapshot(tmp_path / "hub")
    model_identity(candidate(tmp_path / "hub"))
    assert own_cache.is_file()
    again = model_identity(candidate(tmp_path / "hub"))
    assert (again["digests_hashed"], again["digests_cached"]) == (0, 2)
    assert all(f["cached"] for f in again["files"] if f["file"].endswith(".safetensors"))


def test_a_corrupted_shard_is_caught(tmp_path: Path) -> None:
    snapshot = hub_snapshot(tmp_path / "hub")
    model_identity(candidate(tmp_path / "hub"))  # its digest is now cached
    blob = (snapshot / "model-00002-of-00002.safetensors").resolve()
    data = bytearray(blob.read_bytes())
    data[1000] ^= 0xFF  # one flipped byte, same size; the write moves mtime, so no cache hit
    blob.write_bytes(bytes(data))
    corrupted = (
        r"model-00002-of-00002\.safetensors: blob [0-9a-f]{64} "
        r"holds bytes whose digest is [0-9a-f]{64}: not the pinned revision's"
    )
    with pytest.raises(PinMismatch, match=corrupted):
        model_identity(candidate(tmp_path / "hub"))


def test_a_missing_shard_and_an_unindexed_one_are_caught(tmp_path: Path) -> None:
    snapshot = hub_snapshot(tmp_path / "hub")
    (snapshot / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(PinMismatch, match="the index names shards not in the snapshot"):
        model_identity(candidate(tmp_path / "hub"))
    extra = hub_snapshot(
        tmp_path / "hub2",
        files={
            **SHARDS,
            "stray.safetensors": b"x" * 10,
            "model.safetensors.index.json": json.dumps(INDEX).encode(),
        },
    )
    assert extra.is_dir()
    with pytest.raises(PinMismatch, match=r"does not name: \['stray.safetensors'\]"):
        model_identity(candidate(tmp_path / "hub2"))


def test_a_changed_small_file_and_a_plain_copy_are_caught(tmp_path: Path) -> None:
    snapshot = hub_snapshot(tmp_path / "hub")
    (snapshot / "config.json").resolve().write_bytes(b'{"model_type": "mistral"}')
    with pytest.raises(PinMismatch, match=r"config\.json: blob [0-9a-f]{40} holds bytes"):
        model_identity(candidate(tmp_path / "hub"))
    other = hub_snapshot(tmp_path / "hub2")
    (other / "notes.txt").write_text("copied in by hand")
    with pytest.raises(PinMismatch, match=r"notes\.txt is not a link into the cache's blobs/"):
        model_identity(candidate(tmp_path / "hub2"))


def test_an_empty_snapshot_proves_nothing(tmp_path: Path) -> None:
    hub_snapshot(tmp_path / "hub", files={})
    with pytest.raises(PinMismatch, match="holds no files: no pinned bytes to prove"):
        model_identity(candidate(tmp_path / "hub"))


def test_the_cache_key_is_device_inode_size_mtime(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"a" * 1000)
    digests = DigestCache(None)
    assert digests.sha256(path) == (hashlib.sha256(b"a" * 1000).hexdigest(), False)
    assert digests.sha256(path)[1] is True
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert digests.sha256(path)[1] is False  # touched: hashed again
