"""The image reference the engine is asked for (lookup, pull, create, the NCCL probe's ``docker
run``), from ``launch.docker.image`` and the pin. Pure: no Docker, no I/O.

Docker resolves a bare ``repo`` as ``repo:latest``. A campaign image pinned by registry digest
with no tag (``nvcr.io/nvidia/vllm`` + ``sha256:…``) must be asked for as ``repo@sha256:…``, or the
lookup finds no ``:latest`` (NGC tags images like ``26.06-py3``) and ``--pull`` fetches the wrong
image. A tag and a digest together (``repo:tag@sha256:…``) resolve by the digest alone: the
engine ignores the tag there and docker-py's pull mis-splits it. A tag-only image (a local build
pinned by image id) is looked up by its tag and proven by the pin afterwards (``image_matches``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DIGEST = re.compile(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class ImageRef:
    """``launch.docker.image`` split: repository (registry and path), tag, digest as written."""

    repo: str
    tag: str | None = None
    digest: str | None = None


def split_image(image: str) -> ImageRef:
    """``[registry[:port]/]path[:tag][@sha256:…]``; a ``:`` before the last ``/`` is a port."""
    name, _, digest = image.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        return ImageRef(name[:colon], name[colon + 1 :] or None, digest or None)
    return ImageRef(name, None, digest or None)


def image_reference(image: str, pin: str | None) -> str:
    """What Docker is asked for: ``repo@digest`` when the image names a digest or has no tag and
    the pin is a literal digest; else the image as written (its tag is looked up and the pin
    proves the result)."""
    ref = split_image(image)
    if ref.digest:
        return f"{ref.repo}@{ref.digest}"
    if ref.tag:
        return f"{ref.repo}:{ref.tag}"
    if pin and DIGEST.fullmatch(pin):
        return f"{ref.repo}@{pin}"
    return ref.repo


def is_by_digest(reference: str) -> bool:
    return "@" in reference
