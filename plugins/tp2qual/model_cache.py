"""Where a candidate's Hugging Face hub cache lives: a host folder, or a Docker named volume.

``model.hf_cache = "volume:vllm-hfcache"`` names a volume (the user's campaign recipes download
into one, and under Docker Desktop no stable host path reaches it); anything else is a host
path. A volume is mounted read-only into the serve, and gate 00 reads it in a helper container
on the same engine (``serving/volume_snapshot.py``). Pure: spelling and its rules only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

VOLUME_PREFIX = "volume:"


def cache_volume(hf_cache: str | None) -> str | None:
    """The Docker volume ``hf_cache`` names, or None for a host path (or no cache)."""
    if hf_cache is None or not hf_cache.startswith(VOLUME_PREFIX):
        return None
    return hf_cache[len(VOLUME_PREFIX) :]


def cache_problems(spec: Mapping[str, Any]) -> list[str]:
    """A schema-valid ``spec``'s cache rule (the schema holds the volume name's spelling, Docker's
    own rule): only a container can read a volume (a local process has no mount)."""
    model = spec.get("model", {})
    volume = cache_volume(model.get("hf_cache"))
    if volume is None:
        return []
    kind = spec.get("launch", {}).get("kind")
    if kind != "docker":
        return [
            f"model.hf_cache: {model['hf_cache']!r} is a Docker volume, which only a container "
            f'reads: launch.kind is {kind!r} (use launch.kind = "docker", or a host path)'
        ]
    return []
