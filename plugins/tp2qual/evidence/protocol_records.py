"""The dated records a capacity-protocol run is put beside: read from the repository, their
bytes held to the sha256 the candidate pins, copied into the run's evidence.

A record is named in ``[[gates.throughput.protocol.records]]`` by ``path`` (relative to the
candidate file that names it, or absolute), ``sha256``, ``date``, ``tp``, ``serve`` (the
candidate whose serve it records) and ``source`` (where the raw JSON came from). The copy under
``protocol_records/`` is what the comparison and ``verify`` read: a record whose bytes are not
the pinned ones, or that is not there, is listed as such and never compared.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

RECORDS_DIR = "protocol_records"


def copy_name(entry: Mapping[str, Any]) -> str:
    """Where a record's copy sits in the evidence: its date and file name."""
    return f"{RECORDS_DIR}/{entry.get('date')}-{Path(str(entry.get('path'))).name}"


def read_record(entry: Mapping[str, Any], candidate_dir: Path) -> tuple[bytes | None, str]:
    """The record's bytes, or None and why not (absent, or not the pinned sha256)."""
    path = Path(str(entry.get("path", "")))
    path = path if path.is_absolute() else candidate_dir / path
    try:
        raw = path.read_bytes()
    except OSError as exc:
        return None, f"record {entry.get('path')} not readable: {exc.strerror or exc}"
    got = hashlib.sha256(raw).hexdigest()
    if got != entry.get("sha256"):
        return None, f"record {entry.get('path')}: sha256 {got}, pinned {entry.get('sha256')}"
    return raw, ""


def parsed(raw: bytes) -> dict[str, Any] | None:
    """A record's JSON object, or None when it is not one."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    return body if isinstance(body, dict) else None
