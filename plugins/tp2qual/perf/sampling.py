"""One throughput sample from one streamed completion — the definitions, in one place.

TTFT  = arrival of the first chunk carrying output (content or reasoning) - send
E2E   = arrival of the last chunk - send
TPOT  = (E2E - TTFT) / (output tokens - 1)       (AIPerf calls this "inter-token latency")
decode_tok_s = (output tokens - 1) / (E2E - TTFT) = 1 / TPOT
ITL   = gaps between successive output-carrying chunks (chunk-level, not token-level)
Output tokens come from ``usage`` when the stream carries it, else from the server's tokenizer,
else one per content chunk (``output_tokens``: gate 08 and its re-derivation count the same way);
reasoning tokens count as output (AIPerf: OSL = output + reasoning).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from tp2qual.checks.answers import check_finish, split_reasoning
from tp2qual.checks.replies import chunk_delta, content_chunks
from tp2qual.checks.stats import percentile, summarize

FIGURES = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s")  # summarized, claimed, compared


def _carries_output(chunk: dict[str, Any]) -> bool:
    delta = chunk_delta(chunk)
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning"))


def sample(
    chunks: list[dict[str, Any]], times: list[float], output_tokens: int, method: str
) -> dict[str, Any]:
    """Figures for one request; ``times`` are arrival offsets (s) after send."""
    arrivals = [t for c, t in zip(chunks, times, strict=True) if _carries_output(c)]
    if not arrivals:
        return {"ok": False, "reason": "no output chunks", "output_tokens": output_tokens}
    ttft, last = arrivals[0], arrivals[-1]
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    decode_s = last - ttft
    tpot = decode_s / (output_tokens - 1) if output_tokens > 1 and decode_s > 0 else None
    return {
        "ok": tpot is not None,
        "ttft_s": ttft,
        "e2e_s": last,
        "output_tokens": output_tokens,
        "token_count_method": method,
        "output_chunks": len(arrivals),
        "tpot_s": tpot,
        "decode_tok_s": 1 / tpot if tpot else None,
        "itl_p50_s": percentile(gaps, 50) if gaps else None,
        "itl_p90_s": percentile(gaps, 90) if gaps else None,
        "itl_p99_s": percentile(gaps, 99) if gaps else None,
    }


def stream_finish(chunks: list[dict[str, Any]]) -> str | None:
    """The last finish reason a stream's choice 0 sent."""
    found = None
    for chunk in chunks:
        choices = chunk.get("choices") or [{}]
        first = choices[0] if isinstance(choices[0], dict) else {}
        found = first.get("finish_reason") or found
    return found


def judge_ending(
    figures: dict[str, Any], chunks: list[dict[str, Any]], allowed: Sequence[str] | None
) -> dict[str, Any]:
    """A sample whose stream ended outside the gate's ``finish_reasons``, or with no visible
    text, is no sample (``answers.check_finish``): a capped sample is fine where ``length`` is
    allowed, one cut inside its reasoning timed no answer. ``allowed`` None: a run recorded
    before endings were judged, its figures as they were."""
    if allowed is None or not figures.get("ok"):
        return figures
    joined = {
        key: "".join(chunk_delta(c).get(key) or "" for c in chunks)
        for key in ("content", "reasoning_content", "reasoning")
    }
    answer, reasoning = split_reasoning(joined)
    finish = stream_finish(chunks)
    ending = check_finish(answer, reasoning, finish, allowed)
    if ending.ok:
        return figures | {"finish_reason": finish}
    cls = ending.measures["finish_class"]
    return figures | {"ok": False, "reason": ending.reason, "finish_class": cls}


def usage_tokens(usage: dict[str, Any] | None) -> int | None:
    """``completion_tokens`` of a stream's ``usage``, when it carries a count."""
    count = (usage or {}).get("completion_tokens")
    return count if isinstance(count, int) and count > 0 else None


def output_tokens(
    usage: dict[str, Any] | None,
    tokenized: tuple[int | None, Any] | None,
    chunks: list[dict[str, Any]],
) -> tuple[int, str]:
    """Output tokens of one stream and how they were counted: ``usage``, else the server's
    tokenizer on the streamed text (``tokenized``: that answer's status and body, asked only
    when ``usage_tokens`` gives none), else one per content chunk."""
    if (count := usage_tokens(usage)) is not None:
        return count, "usage"
    status, body = tokenized or (None, None)
    if status == 200 and isinstance(body, dict) and isinstance(body.get("tokens"), list):
        return len(body["tokens"]), "server_tokenizer"
    return content_chunks(chunks), "chunks"


def summary(samples: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``checks.stats.summarize`` of each figure over the measured samples."""
    return {name: summarize([s[name] for s in samples]).as_dict() for name in FIGURES}
