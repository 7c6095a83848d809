"""Image pins for Docker candidates: a registry digest or a local image id, or a placeholder
(``{x_y}``) resolved from ``TP2QUAL_X_Y`` or ``.cache/x-y`` that a local build writes."""

from __future__ import annotations

import re
from collections.abc import Mapping

from tp2qual.candidate import Candidate
from tp2qual.checks.preflight import image_matches
from tp2qual.exceptions import CandidateError
from tp2qual.local_pins import Pin, PinRule, resolve_local_pin

__all__ = ["Pin", "image_matches", "pin_unresolved", "resolve_pin"]

IMAGE_PIN = PinRule("launch.docker.pin", re.compile(r"sha256:[0-9a-f]{64}"), "sha256:<64 hex>")


# ---------------------------------------------------------------------------------------------
# Pins


def resolve_pin(candidate: Candidate, environ: Mapping[str, str] | None = None) -> Pin:
    """``sha256:…`` is taken as written; ``{some_name}`` is filled by a local build
    (``tp2qual.local_pins``: ``TP2QUAL_SOME_NAME``, else ``.cache/some-name``, which the build
    script writes). Unresolved: ``value`` is None and ``source`` says where it looked."""
    raw = candidate.launch["docker"]["pin"]
    return resolve_local_pin(raw, IMAGE_PIN, candidate.path, environ, candidate.name)


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
