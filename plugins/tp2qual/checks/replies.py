"""What a completion's body carries, or why it does not; what a stream's chunks carry.

Every gate reads an answer's choice, message and ``usage`` through these readers (by way of the
``Exchange`` accessors in serving/server.py, which raise ``MalformedReply``), so a body without
them — no ``choices``, an empty list, no ``message``, no token count, a body that is not JSON —
is the candidate's answer, judged as one with the body quoted, never read blindly into a
KeyError. Pure: status and body in, the part or the reason out.
"""

from __future__ import annotations

import json
from typing import Any

QUOTE_LIMIT = 300  # characters of a body quoted in a reason


def excerpt(body: Any, limit: int = QUOTE_LIMIT) -> str:
    """The body as the server sent it (JSON re-serialised), cut at ``limit`` characters."""
    text = body if isinstance(body, str) else json.dumps(body, sort_keys=True, default=str)
    return text[:limit] + ("…" if len(text) > limit else "")


def reply_choice(status: int | None, body: Any) -> tuple[dict[str, Any] | None, str]:
    """Choice 0 of an HTTP 200 completion, or why there is none (the status and the body)."""
    if status != 200:
        return None, f"HTTP {status}: {excerpt(body)}"
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, f"HTTP 200 without a completion choice: {excerpt(body)}"
    return choices[0], ""


def reply_message(status: int | None, body: Any) -> tuple[dict[str, Any] | None, str]:
    """Choice 0's message of a non-streamed chat completion, or why there is none: an HTTP
    error (its status and body) or a 200 that carries no message."""
    if status != 200:
        return None, f"HTTP {status}: {excerpt(body)}"
    choice, _ = reply_choice(status, body)
    message = choice.get("message") if choice is not None else None
    if not isinstance(message, dict):
        return None, f"HTTP 200 without a chat completion message: {excerpt(body)}"
    return message, ""


def usage_count(status: int | None, body: Any, key: str) -> tuple[int | None, str]:
    """``usage.<key>`` (``prompt_tokens``, ``completion_tokens``) of an HTTP 200 answer, or why
    there is none."""
    if status != 200:
        return None, f"HTTP {status}: {excerpt(body)}"
    usage = body.get("usage") if isinstance(body, dict) else None
    value = usage.get(key) if isinstance(usage, dict) else None
    if not isinstance(value, int) or isinstance(value, bool):
        return None, f"HTTP 200 without a token count (usage.{key}): {excerpt(body)}"
    return value, ""


def chunk_delta(chunk: dict[str, Any]) -> dict[str, Any]:
    """Choice 0's ``delta`` of one stream chunk (empty when the chunk carries none)."""
    choices = chunk.get("choices") or [{}]
    delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
    return delta if isinstance(delta, dict) else {}


def stream_text(chunks: list[dict[str, Any]]) -> str:
    """The answer text a stream's chunks carry, in order."""
    return "".join(chunk_delta(c).get("content") or "" for c in chunks)


def content_chunks(chunks: list[dict[str, Any]]) -> int:
    """Chunks that carry answer text (about one token each on the engines here)."""
    return sum(1 for c in chunks if chunk_delta(c).get("content"))


def stream_usage(chunks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last ``usage`` a stream sent (``stream_options.include_usage``), or None."""
    return next((c["usage"] for c in reversed(chunks) if c.get("usage")), None)
