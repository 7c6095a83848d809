"""Gate 06's context ladder: the prompt sizes it climbs, and what one streamed row measured.

The user measures a ladder of prompt sizes (32K / 128K / 240K tokens, up to 1M) with TTFT,
prefill and decode on every row (fakoli/anvil-serving, closed ticket
``2026-08-02-context-ladder-drops-per-row-timing.md``). Here the rows are fractions of the bound
(``gates.capacity.ladder_fractions``) and absolute sizes (``ladder_tokens``, kept only where the
bound holds them), each no larger than fits beside the reply budget (``needle.fits_beside``,
the needle's own rule), and the needle near the bound (``needle.needle_plan``) is the top row:
one long prompt, asked once. Rows within ``ladder_merge`` of each other are one row, which
names everything that asked for it.

Every row hides the needle and is judged by the needle's rule (``needle.judge_needle``): a row
whose needle is not found fails the gate. Its timings are recorded, never judged:

- ``ttft_output_s``: send to the first chunk carrying output (content or reasoning), TTFO;
- ``ttft_visible_s``: send to the first chunk carrying answer text (differs where it reasons);
- ``prefill_tok_s_effective``: prompt tokens / TTFO: queueing, HTTP and the first decode step
  included, the user's "effective prefill";
- ``decode_tok_s``: (output tokens - 1) / (last output chunk - first), ``perf.sampling``'s.

Pure: the gate and ``verify`` (evidence/rederive/capacity.py) call the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.needle import fits_beside, judge_needle, needle_plan
from tp2qual.checks.replies import chunk_delta, stream_usage
from tp2qual.perf.sampling import output_tokens, sample, stream_finish

LADDER_FILE = "capacity_ladder.jsonl"
NEEDLE_TAG = "needle"  # the needle near the bound: the ladder's top row, gate 06's first check
COUNT_SUFFIX = "-count"  # a row's prompt counted by a plain request, where the stream said not
DEFAULT_MERGE = 0.1


@dataclass(frozen=True)
class Rung:
    """One row of the ladder as planned: its exchange's tag, its prompt size, who asked."""

    tag: str
    prompt_tokens: int  # the target, on the server's own token counts (calibrated)
    asked: tuple[str, ...]  # "fill 0.9", "1/8 of the bound", "32,768 tokens"


@dataclass(frozen=True)
class LadderPlan:
    rungs: tuple[Rung, ...]  # smallest first; the needle's among them
    skipped: tuple[str, ...]  # absolute sizes the bound does not hold, with why


def _fraction(f: float) -> str:
    for d in (2, 3, 4, 8, 16, 32):
        if abs(f * d - round(f * d)) < 1e-9 and round(f * d) == 1:
            return f"1/{d} of the bound"
    return f"{f:g} of the bound"


def ladder_plan(max_model_len: int, settings: Mapping[str, Any]) -> LadderPlan:
    """The rows gate 06 asks, smallest first: the needle's, then each fraction and each
    absolute size the bound holds, capped at what fits beside the reply budget; a row within
    ``ladder_merge`` (a share of the larger) of a row already planned joins it."""
    top = needle_plan(max_model_len, settings)
    fits = fits_beside(max_model_len, top.budget)
    rows = [Rung(NEEDLE_TAG, top.prompt_tokens, (f"fill {float(settings['fill']):g}",))]
    asks: list[tuple[int, str]] = []
    skipped = []
    for f in settings.get("ladder_fractions") or ():
        asks.append((max(1, min(int(max_model_len * float(f)), fits)), _fraction(float(f))))
    for n in settings.get("ladder_tokens") or ():
        if int(n) > max_model_len:
            skipped.append(f"{int(n):,} tokens: over the {max_model_len:,}-token bound")
            continue
        asks.append((min(int(n), fits), f"{int(n):,} tokens"))
    merge = float(settings.get("ladder_merge", DEFAULT_MERGE))
    for size, why in sorted(asks, reverse=True):
        near = next((r for r in rows if abs(r.prompt_tokens - size) <= merge * max(size, 1)), None)
        if near is None:
            rows.append(Rung(f"ladder-{size}", size, (why,)))
        else:
            rows[rows.index(near)] = Rung(near.tag, near.prompt_tokens, (*near.asked, why))
    return LadderPlan(tuple(sorted(rows, key=lambda r: r.prompt_tokens)), tuple(skipped))


def stream_message(chunks: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """A streamed answer as one message: its content and reasoning, joined in order."""
    return {
        key: "".join(chunk_delta(dict(c)).get(key) or "" for c in chunks)
        for key in ("content", "reasoning_content", "reasoning")
    }


def prompt_count(
    chunks: Sequence[Mapping[str, Any]], counted: Mapping[str, Any] | None
) -> tuple[int | None, str]:
    """A row's prompt tokens and where they come from: the stream's ``usage``, else the plain
    request that counted the same prompt (``counted``: its raw exchange; llama-cpp-python
    streams no usage), else none."""
    usage = stream_usage([dict(c) for c in chunks]) or {}
    if isinstance(n := usage.get("prompt_tokens"), int) and not isinstance(n, bool):
        return n, "stream usage"
    if counted and counted.get("status") == 200 and isinstance(counted.get("response"), dict):
        got = (counted["response"].get("usage") or {}).get("prompt_tokens")
        if isinstance(got, int) and not isinstance(got, bool):
            return got, "count request"
    return None, "not reported"


def _first(chunks: Sequence[Mapping[str, Any]], times: Sequence[float], *keys: str) -> Any:
    return next(
        (
            t
            for c, t in zip(chunks, times, strict=True)
            if any(chunk_delta(dict(c)).get(k) for k in keys)
        ),
        None,
    )


def ladder_row(
    rung: Rung,
    chunks: Sequence[Mapping[str, Any]],
    times: Sequence[float],
    prompt: tuple[int | None, str],
    max_model_len: int,
    settings: Mapping[str, Any],
) -> dict[str, Any]:
    """One row of ``capacity_ladder.jsonl``: the prompt measured, the timings, the needle."""
    listed = [dict(c) for c in chunks]
    tokens, counted_by = prompt
    count, method = output_tokens(stream_usage(listed), None, listed)
    figures = sample(listed, list(times), count, method)
    ttfo = figures.get("ttft_s")
    judged, wrong = judge_needle(
        stream_message(listed), stream_finish(listed), tokens, max_model_len, settings
    )
    prefill = tokens / ttfo if isinstance(tokens, int) and ttfo else None
    row = {
        "tag": rung.tag,
        "asked": list(rung.asked),
        "planned_tokens": rung.prompt_tokens,
        "prompt_tokens": tokens,
        "prompt_tokens_from": counted_by,
        "fill": judged["fill"],
        "ttft_output_s": ttfo,
        "ttft_visible_s": _first(listed, times, "content"),
        "prefill_tok_s_effective": prefill,
        "decode_tok_s": figures.get("decode_tok_s"),
        "output_tokens": count,
        "output_tokens_from": method,
        "finish_reason": stream_finish(listed),
        "answer": judged["answer"],
        "needle_found": judged["ok"],
    }
    return row | ({"why": wrong} if wrong else {})


def ladder_misses(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Each row whose needle was not found, named by its size: the gate's failures."""
    return [
        f"{r.get('tag')} ({r.get('prompt_tokens')} prompt tokens): {r.get('why') or 'not found'}"
        for r in rows
        if not r.get("needle_found")
    ]


def plan_lines(max_model_len: int, settings: Mapping[str, Any]) -> list[str]:
    """The ladder ``--plan`` says out loud: each row's prompt size and who asked for it."""
    plan = ladder_plan(max_model_len, settings)
    lines = ["one streamed request a row, a needle in each (a miss FAILs); timings not judged"]
    lines += [f"{r.tag}: {r.prompt_tokens:,} tokens ({', '.join(r.asked)})" for r in plan.rungs]
    return lines + [f"not asked: {why}" for why in plan.skipped]
