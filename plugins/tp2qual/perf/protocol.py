"""The user's capacity protocols, request by request: the definitions, in one place.

``capacity-v3`` and ``capacity-v4-reasoning`` (fakoli/anvil-serving, the 2026-08-01 TP2 capacity
rows; their ``timing_methodology``) time one streamed request at c1, client clock:

TTFO  = send -> the first non-empty reasoning or content delta     (time to first output)
TTFT  = send -> the first non-empty content delta                  (first *visible* output)
E2E   = send -> the end of the stream
effective prefill = usage.prompt_tokens / TTFO   (queueing, scheduling and first token included)
decode            = (usage.completion_tokens - 1) / (E2E - TTFO)   (reasoning tokens included)

Under ``capacity-v3`` no reasoning comes back, so TTFO = TTFT and decode runs from the first
visible content; ``capacity-v4-reasoning`` keeps the two apart (prefill and decode from TTFO,
TTFT still the first visible content). Prompt and output tokens come from the stream's ``usage``
only: a request whose stream carries none, or no visible content, is no sample. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tp2qual.checks.replies import chunk_delta, stream_usage
from tp2qual.checks.stats import summarize

V3, V4 = "capacity-v3", "capacity-v4-reasoning"
PROTOCOLS = (V3, V4)

# The figures of one request, summarized per run (median, mean and the mean's 95 % CI).
FIGURES = ("prompt_tokens", "ttfo_s", "ttft_s", "effective_prefill_tok_s", "decode_tok_s", "e2e_s")

# Where each figure's clock starts or ends, per protocol: what "definitions match" compares.
ORIGINS = {
    V3: {
        "ttft_s": "first non-empty content delta",
        "effective_prefill_tok_s": "usage.prompt_tokens / first non-empty content delta",
        "decode_tok_s": "(usage.completion_tokens - 1) / (stream end - first content delta)",
    },
    V4: {
        "ttfo_s": "first non-empty reasoning or content delta",
        "ttft_s": "first non-empty content delta",
        "effective_prefill_tok_s": "usage.prompt_tokens / first reasoning or content delta",
        "decode_tok_s": (
            "(usage.completion_tokens - 1) / (stream end - first reasoning or content delta)"
        ),
    },
}


def _first(
    chunks: Sequence[Mapping[str, Any]], times: Sequence[float], keys: tuple[str, ...]
) -> float | None:
    for chunk, t in zip(chunks, times, strict=True):
        delta = chunk_delta(dict(chunk))
        if any(delta.get(k) for k in keys):
            return t
    return None


def request_figures(
    chunks: Sequence[Mapping[str, Any]], times: Sequence[float], e2e_s: float | None
) -> dict[str, Any]:
    """One request's figures; ``times`` are chunk arrivals after send, ``e2e_s`` the stream's
    end after send (as ``Api.stream_chat`` records it)."""
    ttfo = _first(chunks, times, ("reasoning_content", "reasoning", "content"))
    ttft = _first(chunks, times, ("content",))
    usage = stream_usage([dict(c) for c in chunks]) or {}
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    row: dict[str, Any] = {
        "prompt_tokens": prompt,
        "output_tokens": completion,
        "ttfo_s": ttfo,
        "ttft_s": ttft,
        "e2e_s": e2e_s,
    }
    why = _no_sample(ttfo, ttft, prompt, completion, e2e_s)
    if why:
        return {**row, "ok": False, "reason": why}
    assert ttfo is not None and ttft is not None and e2e_s is not None  # _no_sample checked
    assert isinstance(prompt, int) and isinstance(completion, int)
    generation = e2e_s - ttfo
    return {
        **row,
        "ok": True,
        "effective_prefill_tok_s": prompt / ttfo if ttfo > 0 else None,
        "decode_tok_s": (completion - 1) / generation if generation > 0 else None,
        "reasoned": ttfo < ttft,
    }


def _no_sample(ttfo, ttft, prompt, completion, e2e_s) -> str:  # type: ignore[no-untyped-def]
    if ttft is None:
        return "no visible content (the protocols time the first visible content)"
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return "the stream carried no usage: prompt and output tokens unknown"
    if completion < 2:
        return f"{completion} output token(s): no decode interval"
    if e2e_s is None or e2e_s < ttft:
        return "no stream end after the first content"
    return ""


def summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``checks.stats.summarize`` of each figure over the requests that are samples."""
    out = {}
    for name in FIGURES:
        values = [float(r[name]) for r in rows if r.get("ok") and r.get(name) is not None]
        if values:
            out[name] = summarize(values).as_dict()
    return out


def protocol_problems(protocol: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What makes a run not the protocol it says: ``capacity-v3`` is a run with no reasoning
    (the user's tool names a run v4 as soon as a reasoning chunk came back)."""
    if protocol == V3 and (n := sum(1 for r in rows if r.get("reasoned"))):
        return [f"{n} request(s) reasoned before their content: that is {V4}, not {V3}"]
    return []
