"""Read a hub snapshot inside a Docker volume: run in a helper container's own Python.

Standard library only, Python 3.10 or later, free of ``from __future__``: the helper is sent
``checks/content_address.py``'s source followed by this file's (``volume_snapshot.script``), so
the names imported below are already defined there and the import is skipped. It takes one JSON
argument and prints one JSON object: per file of ``<root>/<repo_dir>/snapshots/<revision>``, the
blob its link resolves to, the blob's size and mtime as seen inside, and its digest (a sha256
the host already knows for that path, size and mtime is taken, not hashed again), plus the
index's text. It decides nothing: the host judges it with gate 00's own functions.
"""

import contextlib
import json
import os
import sys

with contextlib.suppress(ImportError):  # on the host; inside the helper the names precede this
    from tp2qual.checks.content_address import address_kind, file_git_sha1, file_sha256

INDEX = "model.safetensors.index.json"


def snapshot_files(snapshot: str) -> list[str]:
    """Every file or link under the snapshot, relative, in one stable order."""
    found = []
    for folder, _, names in os.walk(snapshot):
        for name in names:
            found.append(os.path.relpath(os.path.join(folder, name), snapshot).replace(os.sep, "/"))
    return sorted(found)


def entry(root: str, snapshot: str, rel: str, known: dict) -> dict:
    """One file's record, in the shape ``serving/hub_snapshot._entry`` gives on a host path;
    ``target`` is the blob's path inside the volume."""
    blob = os.path.realpath(os.path.join(snapshot, rel))
    inside = "/" + os.path.relpath(blob, root).replace(os.sep, "/")
    name = os.path.basename(blob)
    in_blobs = os.path.basename(os.path.dirname(blob)) == "blobs" and not inside.startswith("/..")
    out = {"file": rel, "target": inside, "on_disk": os.path.isfile(blob)}
    out.update(in_blobs=in_blobs, blob=name)
    if not (out["on_disk"] and in_blobs):
        return out
    kind = address_kind(name)
    if kind is None:
        return out
    stat = os.stat(blob)
    key = f"{inside}:{stat.st_size}:{stat.st_mtime_ns}"
    cached = kind == "sha256" and key in known
    if cached:
        digest = known[key]
    else:
        digest = file_sha256(blob) if kind == "sha256" else file_git_sha1(blob)
    out.update(digest=digest, address=f"{kind}:{digest}", bytes=stat.st_size, cached=cached)
    return out | {"key": key}


def walk(ask: dict) -> dict:
    """What the snapshot holds, or ``snapshot_dir: False`` when the revision is not there."""
    root = ask["root"]
    snapshot = os.path.join(root, ask["repo_dir"], "snapshots", ask["revision"])
    if not os.path.isdir(snapshot):
        have = os.path.join(root, ask["repo_dir"], "snapshots")
        revisions = sorted(os.listdir(have)) if os.path.isdir(have) else None
        return {"snapshot_dir": False, "revisions": revisions}
    known = ask.get("known") or {}
    files = [entry(root, snapshot, rel, known) for rel in snapshot_files(snapshot)]
    index = os.path.join(snapshot, INDEX)
    text = None
    if os.path.exists(index):
        with open(index, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
    return {"snapshot_dir": True, "files": files, "index_text": text}


if __name__ == "__main__":
    print(json.dumps(walk(json.loads(sys.argv[1]))))
