"""The hub cache's content addresses: how a blob's name addresses its bytes, and the digests.

Standard library only, Python 3.10 or later, free of ``from __future__``, on purpose: gate 00
checks a snapshot in a Docker volume by sending this module's source, with
``serving/volume_walk.py`` after it, to a helper container's own Python
(``serving/volume_snapshot.py``). So the host and the volume hash by one copy of the rule.
"""

import hashlib
import re

SHA256 = re.compile(r"[0-9a-f]{64}")
GIT_SHA1 = re.compile(r"[0-9a-f]{40}")
BLOCK = 1 << 24  # 16 MiB reads: weights are tens of GB


def address_kind(blob: str) -> str | None:
    """How a blob's name addresses its bytes: ``sha256`` (LFS), ``git-sha1`` (small files)."""
    if SHA256.fullmatch(blob):
        return "sha256"
    if GIT_SHA1.fullmatch(blob):
        return "git-sha1"
    return None


def git_blob_sha1(data: bytes) -> str:
    """The id git (and the hub cache, for a non-LFS file) gives these bytes."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def file_sha256(path: str) -> str:
    """The sha256 of a file's bytes, read in blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def file_git_sha1(path: str) -> str:
    """The git blob id of a (small) file's bytes."""
    with open(path, "rb") as fh:
        return git_blob_sha1(fh.read())
