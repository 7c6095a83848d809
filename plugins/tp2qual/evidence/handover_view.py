"""The report's hand-over section: each serve the run took the GPUs from, its state before and
after, and how long the serves were down, read from ``handover.json``; "restored" is judged
again here (``checks.handover.judge_restored``), as verify does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tp2qual.artifacts.layout import read_json_object
from tp2qual.checks.handover import judge_restored

RECORD = "handover.json"


@dataclass(frozen=True)
class HandoverView:
    summary: str
    restored: bool
    rows: tuple[tuple[str, str, str], ...]  # container, before, after
    commands: tuple[str, ...]


def _state(state: Mapping[str, Any] | None) -> str:
    if state is None:
        return "not found"
    health = state.get("health") or "no healthcheck"
    answered = state.get("url_answered")
    url = "" if answered is None else (", URL answered" if answered else ", URL did not answer")
    return f"{state.get('status')} ({health}{url}), image {str(state.get('image_id'))[:19]}"


def handover_view(run_dir: Path) -> HandoverView | None:
    record = read_json_object(run_dir / RECORD)
    if not record:
        return None
    verdict = judge_restored(record)
    after = {s.get("id"): s for s in record.get("after") or [] if s}
    rows = tuple(
        (s["name"], _state(s), _state(after.get(s.get("id"))) if record.get("after") else "—")
        for s in record.get("before") or []
    )
    down = record.get("down_s")
    summary = f"every serve back as found; down {down} s" if verdict.ok else verdict.reason
    return HandoverView(summary, verdict.ok, rows, tuple(verdict.measures.get("commands", [])))
