"""Gate 06's rule for a prompt over the bound: how the engine answered it, told apart.

A clean rejection is a 4xx with a JSON error body. Streamed, an engine may also reject *inside*
an HTTP 200 stream: SGLang sends the over-length error as the stream's first chunk when its
scheduler's admission check trips (sgl-project/sglang#12081; ``tp2qual/engines/sglang.py``).
That is the engine refusing the prompt, recorded as its way, never a silent truncation. What
fails: a 200 that serves an answer with no error (silently truncated or over-served), a 5xx or
a 5xx-coded error in the stream, a 4xx without an error body. Both error envelopes are read:
OpenAI's ``{"error": {...}}`` (vLLM, SGLang's streamed chunk) and SGLang's top-level
``{"object": "error", "message": ...}``. Pure: the exchange in, a frozen result out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from tp2qual.engines import ENVELOPES, OverLength


class OverBound(StrEnum):
    REJECTED = "rejected"  # a 4xx with a JSON error body
    REJECTED_IN_STREAM = "rejected_in_stream"  # HTTP 200, a 4xx-coded error as the stream's answer
    ACCEPTED = "accepted"  # HTTP 200 and no error: truncated or over-served, silently
    SERVER_ERROR = "server_error"  # a 5xx, or a 5xx-coded error in the stream
    MALFORMED = "malformed"  # a 4xx without an error body, an uncoded error in a stream, ...


PASSING = frozenset({OverBound.REJECTED, OverBound.REJECTED_IN_STREAM})


@dataclass(frozen=True)
class OverBoundAnswer:
    outcome: OverBound
    status: int | None
    message: str = ""  # the engine's own error message
    envelope: str = ""  # which envelope carried it
    code: int | None = None  # the error's own code (in a stream: the status it stands for)
    names_length: bool = False  # the message is one of the engine's over-length messages
    note: str = ""  # a rejection inside a stream: whether that is the engine's known way
    problem: str = ""  # why this is not a clean rejection; "" when it is one

    @property
    def ok(self) -> bool:
        return self.outcome in PASSING

    def said(self) -> str:
        """The answer in one line, for the evidence and the report."""
        if self.outcome is OverBound.REJECTED_IN_STREAM:
            return (
                f"rejected inside an HTTP 200 stream (error chunk, code {self.code}; "
                f"{self.note}): {self.message[:160]}"
            )
        if self.outcome is OverBound.REJECTED:
            return f"rejected with HTTP {self.status}: {self.message[:160]}"
        return self.problem

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "outcome": str(self.outcome), "ok": self.ok, "said": self.said()}


def read_error(body: Any) -> tuple[dict[str, Any], str] | None:
    """The error object in ``body`` and the envelope's name, in either envelope; else None."""
    for envelope in ENVELOPES:
        error = envelope.error_of(body)
        if error is not None:
            return error, envelope.name
    return None


def _code(error: Mapping[str, Any]) -> int | None:
    code = error.get("code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return int(code) if isinstance(code, str) and code.isdigit() else None


def _has_answer(chunk: Mapping[str, Any]) -> bool:
    for choice in chunk.get("choices") or []:
        delta = (choice or {}).get("delta") or {}
        if any(delta.get(k) for k in ("content", "reasoning_content", "reasoning", "tool_calls")):
            return True
    return False


def classify(
    status: int | None,
    body: Any,
    chunks: Sequence[Mapping[str, Any]] | None = None,
    over_length: OverLength | None = None,
) -> OverBoundAnswer:
    """How the engine answered a prompt over its bound: ``status`` and ``body`` (a non-streamed
    answer, or a stream's error body), and for a stream its ``chunks`` in order (None: the
    request was not streamed). ``over_length``: the engine's known messages, to record whether
    the rejection named the length."""
    if status == 200 and chunks is not None:
        return _in_stream(chunks, over_length)
    if status == 200:
        why = "accepted (HTTP 200): silently truncated or over-served"
        return OverBoundAnswer(OverBound.ACCEPTED, 200, problem=why)
    found = read_error(body)
    message, envelope = (str(found[0]["message"]), found[1]) if found else ("", "")
    loose = isinstance(body, Mapping) and bool({"error", "detail", "message"} & body.keys())
    if found is None and loose:  # another JSON error body ({"detail": ...}, {"error": "..."})
        message = next(str(body[k]) for k in ("error", "detail", "message") if k in body)
    named = bool(over_length and message and over_length.names_length(message))
    answer = OverBoundAnswer(OverBound.MALFORMED, status, message, envelope, status, named)
    if status is None or status >= 500:
        why = f"HTTP {status}: a server error, not a clean rejection"
        return _but(answer, OverBound.SERVER_ERROR, why)
    if not 400 <= status < 500:
        return _but(answer, OverBound.MALFORMED, f"HTTP {status}")
    if found is None and not loose:
        return _but(answer, OverBound.MALFORMED, f"HTTP {status} without a JSON error body")
    return _but(answer, OverBound.REJECTED, "")


def _in_stream(
    chunks: Sequence[Mapping[str, Any]], over_length: OverLength | None
) -> OverBoundAnswer:
    """An HTTP 200 stream: the first error chunk, unless an answer was served before it."""
    served = 0
    for chunk in chunks:
        found = read_error(chunk)
        if found is None:
            served += _has_answer(chunk)
            continue
        error, envelope = found
        message, code = str(error["message"]), _code(error)
        named = bool(over_length and over_length.names_length(message))
        answer = OverBoundAnswer(OverBound.MALFORMED, 200, message, envelope, code, named)
        if served:
            why = f"HTTP 200: {served} answer chunks served before the error {message[:120]!r}"
            return _but(answer, OverBound.ACCEPTED, why)
        if code is not None and code >= 500:
            why = f"HTTP 200 with a server error in the stream (code {code}): {message[:120]}"
            return _but(answer, OverBound.SERVER_ERROR, why)
        if code is None or not 400 <= code < 500:
            why = f"HTTP 200 with an error in the stream that gives no 4xx code: {message[:120]}"
            return _but(answer, OverBound.MALFORMED, why)
        way = over_length.in_stream_note if over_length and over_length.rejects_in_stream else ""
        note = way or "not a way this engine is known to answer; recorded"
        return replace(answer, outcome=OverBound.REJECTED_IN_STREAM, note=note)
    why = (
        f"accepted (HTTP 200, {served} answer chunks, no error in the stream): silently "
        "truncated or over-served"
    )
    return OverBoundAnswer(OverBound.ACCEPTED, 200, problem=why)


def _but(answer: OverBoundAnswer, outcome: OverBound, problem: str) -> OverBoundAnswer:
    return replace(answer, outcome=outcome, problem=problem)


def over_bound_problems(
    plain: OverBoundAnswer, streamed: OverBoundAnswer | None, after_status: int | None
) -> list[str]:
    """Gate 06's over-bound check in full: the prompt rejected (streamed too, when asked), and
    the server answering afterwards. Empty: it passes."""
    problems = [plain.problem] if plain.problem else []
    if streamed is not None and streamed.problem:
        problems.append(f"streamed: {streamed.problem}")
    if after_status != 200:
        problems.append(f"server unhealthy afterwards: HTTP {after_status}")
    return problems
