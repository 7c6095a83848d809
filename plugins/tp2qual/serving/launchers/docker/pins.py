"""Image pins for Docker candidates: a registry digest or a local image id, or a placeholder
(``{x_y}``) resolved from ``TP2QUAL_X_Y`` or ``.cache/x-y`` that a local build writes."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.exceptions import CandidateError

_PIN_PLACEHOLDER = re.compile(r"^\{([a-z0-9_]+)\}$")


# ---------------------------------------------------------------------------------------------
# Pins


@dataclass(frozen=True)
class Pin:
    """The candidate's image pin as written, what it resolved to and from where."""

    raw: str
    value: str | None
    source: str

    def as_dict(self) -> dict[str, Any]:
        return {"raw": self.raw, "value": self.value, "source": self.source}


def resolve_pin(candidate: Candidate, environ: Mapping[str, str] | None = None) -> Pin:
    """``sha256:…`` is taken as written. ``{some_name}`` is filled by a local build: from the
    environment variable ``TP2QUAL_SOME_NAME``, else from the file ``.cache/some-name`` in the
    candidate file's folder or one above it, else the working directory (the build script
    writes it). Unresolved: ``value`` is None and ``source`` says where it looked."""
    raw = candidate.launch["docker"]["pin"]
    match = _PIN_PLACEHOLDER.match(raw)
    if match is None:
        return Pin(raw, raw, "candidate file")
    key = match.group(1)
    env_name = "TP2QUAL_" + key.upper()
    value = (environ if environ is not None else os.environ).get(env_name, "").strip()
    if value:
        return Pin(raw, _checked_pin(value, env_name, candidate), f"${env_name}")
    file_name = key.replace("_", "-")
    places = [*candidate.path.resolve().parents, Path.cwd()]
    for folder in places:
        path = folder / ".cache" / file_name
        if path.is_file():
            text = path.read_text(encoding="utf-8").strip()
            return Pin(raw, _checked_pin(text, str(path), candidate), str(path))
    return Pin(raw, None, f"${env_name} unset and no .cache/{file_name} above {candidate.path}")


def _checked_pin(value: str, where: str, candidate: Candidate) -> str:
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", value):
        raise CandidateError(
            f"launch.docker.pin: {where} holds {value[:80]!r}, not sha256:<64 hex>",
            candidate=candidate.name,
        )
    return value


def pin_unresolved(candidate: Candidate) -> str | None:
    """For ``why_not_runnable``: why the pin cannot be known here, or None."""
    if candidate.launcher_kind != "docker":
        return None
    try:
        pin = resolve_pin(candidate)
    except CandidateError as exc:
        return str(exc)
    if pin.value is not None:
        return None
    how = candidate.launch["docker"].get("how_to_pin", "")
    return f"image pin {pin.raw} is unresolved ({pin.source})" + (f"; {how}" if how else "")


def image_matches(attrs: Mapping[str, Any], pin: str) -> bool:
    """A pin is the image id (local build) or the digest in one of its RepoDigests."""
    return attrs.get("Id") == pin or any(
        d.rpartition("@")[2] == pin for d in attrs.get("RepoDigests") or []
    )
