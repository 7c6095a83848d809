"""The helper's program (``volume_snapshot.script()``: the content-address rule, then the
walker), run as the helper runs it, ``python3 -I -c``, on a hub snapshot in a host folder: it
reads what the host path check reads, with the same digests, and takes a known digest only for
the same path, size and mtime. No Docker here: test_volume_docker.py runs it in a volume.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_verify_pins import REPO, REVISION, hub_snapshot

from tp2qual.checks import preflight
from tp2qual.serving.hub_snapshot import (
    DigestCache,
    SnapshotMismatch,
    check_snapshot,
    index_facts,
    judged_snapshot,
)
from tp2qual.serving.volume_snapshot import repo_dir, script

SHARD = "model-00002-of-00002.safetensors"


def walk(hub: Path, known: dict[str, str] | None = None, revision: str = REVISION) -> Any:
    ask = {"root": str(hub), "repo_dir": repo_dir(REPO), "revision": revision}
    done = subprocess.run(
        [sys.executable, "-I", "-c", script(), json.dumps(ask | {"known": known or {}})],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_the_helper_reads_what_the_host_reads(tmp_path: Path) -> None:
    snapshot = hub_snapshot(tmp_path / "hub")
    report = walk(tmp_path / "hub")
    host = check_snapshot(snapshot, DigestCache(None))
    seen = {f["file"]: (f["blob"], f["digest"], f["bytes"]) for f in report["files"]}
    assert seen == {f["file"]: (f["blob"], f["digest"], f["bytes"]) for f in host["files"]}
    blob = (snapshot / SHARD).resolve()
    entry = next(f for f in report["files"] if f["file"] == SHARD)
    assert entry["target"] == "/" + blob.relative_to(tmp_path / "hub").as_posix()
    assert index_facts(report["index_text"]) == host["index"]
    assert preflight.snapshot_problem({**host, "files": report["files"]}) is None


def test_a_known_digest_is_taken_only_for_the_same_size_and_mtime(tmp_path: Path) -> None:
    hub_snapshot(tmp_path / "hub")
    first = {f["file"]: f for f in walk(tmp_path / "hub")["files"]}
    key = first[SHARD]["key"]
    again = {f["file"]: f for f in walk(tmp_path / "hub", {key: "f" * 64})["files"]}
    assert (again[SHARD]["cached"], again[SHARD]["digest"]) == (True, "f" * 64)
    stale = key.rsplit(":", 1)[0] + ":1"  # another mtime: the blob was rewritten
    fresh = {f["file"]: f for f in walk(tmp_path / "hub", {stale: "f" * 64})["files"]}
    assert (fresh[SHARD]["cached"], fresh[SHARD]["digest"]) == (False, first[SHARD]["digest"])


def test_a_revision_not_there_is_said_with_those_that_are(tmp_path: Path) -> None:
    hub_snapshot(tmp_path / "hub")
    report = walk(tmp_path / "hub", revision="f" * 40)
    assert report == {"snapshot_dir": False, "revisions": [REVISION]}


def test_every_wrong_file_in_the_volume_is_named(tmp_path: Path) -> None:
    """The helper hashes every file, so the refusal names each wrong one, not the first."""
    snapshot = hub_snapshot(tmp_path / "hub")
    for name in ("model-00001-of-00002.safetensors", "config.json"):
        blob = (snapshot / name).resolve()
        blob.write_bytes(blob.read_bytes()[:-1] + b"!")
    report = walk(tmp_path / "hub")
    facts = {"files": report["files"], "index": index_facts(report["index_text"])}
    with pytest.raises(SnapshotMismatch) as refused:
        judged_snapshot(facts)
    named = [p.split(":")[0] for p in str(refused.value).split("; ")]
    assert named == ["config.json", "model-00001-of-00002.safetensors"]
