"""Reading an engine's recorded raw answers (plugins/tests/data/<engine>-<version>/), as the
recorded-answer self-tests of each engine do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tp2qual.checks.toolcalls import reassemble_stream


def load(path: Path) -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads(path.read_text())
    if "chunks" in recorded:  # the stream as sent, with its closing "[DONE]"; the gate skips it
        recorded["chunks"] = [c for c in recorded["chunks"] if isinstance(c, dict)]
    return recorded


def tool_call(path: Path) -> tuple[list[dict[str, Any]], str | None]:
    """The recorded reply's tool calls and finish reason, streamed or not."""
    recorded = load(path)
    if "chunks" in recorded:
        got = reassemble_stream(recorded["chunks"])
        return got["tool_calls"], got["finish_reason"]
    choice = recorded["response"]["choices"][0]
    return choice["message"].get("tool_calls") or [], choice["finish_reason"]
