"""Proof, on every answer, that the candidate's reasoning control took effect.

A thinking switch is a request field the engine may ignore: a chat template without the
keyword, a reasoning parser that reasons anyway (SGLang's ``inkling`` parser ignores
``enable_thinking``), an image whose template differs from the one qualified. A serve asked for
no reasoning that reasons anyway is not the serve the user qualified (their 2026-08-01 control
proofs, fakoli/anvil-serving ``docs/findings/2026-08-01-dual-pro-tp2-campaign-evidence/
*-control.json``: "zero reasoning evidence" with thinking disabled, "required reasoning
evidence" with ``reasoning_effort=low``). So every chat answer of every gate is held to the
control the candidate states (``[gates.request] reasoning``):

- ``off``: no ``reasoning_content`` / ``reasoning`` field with text, and no ``<think>`` or
  ``</think>`` in the visible text;
- ``on``: reasoning came back (in either field, or inside think tags);
- ``engine default``: nothing asserted, what came back is recorded.

Pure: a message (or a recorded exchange) in, a frozen verdict or a proof row out. The gates
write the rows (``<gate>_control.jsonl``, through ``serving.server.Api``) and ``verify``
derives them again from the raw exchanges with ``control_rows``: one rule, one copy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.answers import split_reasoning
from tp2qual.checks.verdict import Verdict

OFF = "off"
ON = "on"
DEFAULT = "engine default"
CONTROLS = (OFF, ON, DEFAULT)

NOT_OFF = "control not applied: reasoning returned with thinking off"
NOT_ON = "control not applied: no reasoning returned with reasoning asked"

_FIELDS = ("reasoning_content", "reasoning")
_TAG = re.compile(r"</?think>", re.IGNORECASE)
_CHAT_PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class ReasoningSeen:
    """What reasoning one answer carried: the field it came in (None: neither), its
    characters, the think tags in the visible text and the characters they enclose or open."""

    field: str | None
    field_chars: int
    think_tags: int
    tag_chars: int
    answer_chars: int

    @property
    def seen(self) -> bool:
        return bool(self.field_chars or self.think_tags)

    @property
    def reasoning_chars(self) -> int:
        return self.field_chars + self.tag_chars


def reasoning_seen(message: Mapping[str, Any]) -> ReasoningSeen:
    """The reasoning one chat message carries, wherever the engine put it."""
    field = next((f for f in _FIELDS if str(message.get(f) or "").strip()), None)
    field_chars = len(str(message.get(field) or "").strip()) if field else 0
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    answer, reasoning = split_reasoning({"content": text})
    tags = len(_TAG.findall(text))
    tag_chars = len(reasoning) if tags else 0
    return ReasoningSeen(field, field_chars, tags, tag_chars, len(answer))


def judge_control(asked: str, message: Mapping[str, Any]) -> Verdict:
    """One answer held to the control asked for (``off`` / ``on`` / ``engine default``)."""
    if asked not in CONTROLS:
        raise ValueError(f"unknown reasoning control {asked!r}; use one of {CONTROLS}")
    seen = reasoning_seen(message)
    measures = {
        "asked": asked,
        "seen": seen.seen,
        "field": seen.field,
        "reasoning_chars": seen.reasoning_chars,
        "think_tags": seen.think_tags,
        "answer_chars": seen.answer_chars,
    }
    where = f"in {seen.field}" if seen.field else f"{seen.think_tags} think tag(s) in the text"
    if asked == OFF and seen.seen:
        return Verdict.failed(
            f"{NOT_OFF} ({seen.reasoning_chars} characters of reasoning, {where})",
            control_class=NOT_OFF,
            **measures,
        )
    if asked == ON and not seen.seen:
        return Verdict.failed(
            f"{NOT_ON} ({seen.answer_chars} visible characters, no reasoning field, no think tags)",
            control_class=NOT_ON,
            **measures,
        )
    return Verdict.passed(**measures)


def proof_row(tag: str, asked: str, message: Mapping[str, Any]) -> dict[str, Any]:
    """The row ``<gate>_control.jsonl`` holds for one answer (``verify`` compares it)."""
    verdict = judge_control(asked, message)
    row = {"tag": tag, "ok": verdict.ok, **verdict.measures}
    return row | {"reason": verdict.reason} if not verdict.ok else row


def stream_message(chunks: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Choice 0's message rebuilt from stream chunks, each reasoning field kept by its name."""
    parts: dict[str, list[str]] = {"content": [], **{f: [] for f in _FIELDS}}
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for key, bucket in parts.items():
                if isinstance(delta.get(key), str):
                    bucket.append(delta[key])
    return {key: "".join(bucket) for key, bucket in parts.items() if bucket}


def answered_message(exchange: Mapping[str, Any]) -> dict[str, Any] | None:
    """The chat message a recorded exchange answered with (a ``<gate>.jsonl`` row, streamed or
    not), or None where it is no answered chat completion (an error, a model list, a text
    completion: no chat template, so no thinking switch)."""
    request = exchange.get("request") or {}
    if request.get("path") != _CHAT_PATH or exchange.get("status") != 200:
        return None
    if "chunks" in exchange:
        data = [c.get("data") or {} for c in exchange.get("chunks") or [] if isinstance(c, dict)]
        return stream_message(d for d in data if isinstance(d, dict))
    try:
        message = exchange["response"]["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    return message if isinstance(message, dict) else None


def control_rows(asked: str, exchanges: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One proof row per answered chat exchange, in the order recorded."""
    rows = []
    for exchange in exchanges:
        message = answered_message(exchange)
        if message is not None:
            rows.append(proof_row(str(exchange.get("tag")), asked, message))
    return rows
