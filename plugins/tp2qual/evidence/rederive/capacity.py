"""Gate 06 (capacity): the ladder, the needle near the bound and the over-bound request
judged again.

From ``capacity.jsonl``, the needle is judged by the gate's own rule (``checks.needle``: its
answer held to its budget and the hidden city, its prompt's fill of the context; a streamed
needle read from its chunks, a plain one from an older run from its body); the
over-bound request, its streamed form and the request after it are classified by
the engine's over-length rule (``checks.overlength.classify``, ``over_bound_problems``). The
rows re-derived are ``capacity_results.jsonl``'s, and ``capacity_ladder.jsonl``'s (``ladder``):
each row's plan from the recorded settings and its figures from its stream.
"""

from __future__ import annotations

from typing import Any

from tp2qual.checks.needle import fill_reaches, judge_needle, needle_plan
from tp2qual.checks.overlength import classify, over_bound_problems
from tp2qual.engines import engine_for
from tp2qual.evidence.rederive.capacity_ladder import ladder
from tp2qual.evidence.rederive.common import (
    GateRun,
    Rederived,
    by_tag,
    chunks_of,
    finish_of,
    message_of,
    status_of,
)
from tp2qual.perf.ladder import COUNT_SUFFIX, prompt_count, stream_message
from tp2qual.perf.sampling import stream_finish


def capacity(run: GateRun) -> Rederived:
    raw = by_tag(run.records("capacity.jsonl"))
    out = Rederived(rows={"capacity_results.jsonl": []})
    rows = run.records("capacity_results.jsonl", required=False)
    for row in rows:
        if row.get("check") == "needle":
            tag, new = "needle", _needle(run, raw.get("needle"), raw.get("needle" + COUNT_SUFFIX))
        else:
            tag, new = "over-bound", _over_bound(run, raw)
            if new is not None and "stream" not in row:  # a run from before the stream record:
                new.pop("stream", None)  # its verdict (ok) is still re-derived and compared
        if new is not None and "fill_wanted" not in row:  # from before the needle's plan
            new = {k: v for k, v in new.items() if k not in ("fill_wanted", "fill_reached")}
        if new is None:
            out.unmatched(
                f"capacity.jsonl {tag}", "capacity_results.jsonl", row,
                what="exchange", found="no such exchange",
            )  # fmt: skip
            continue
        out.records += 1
        out.compare(f"capacity.jsonl {tag}", "capacity_results.jsonl", row, **new)
        out.rows["capacity_results.jsonl"].append({**row, **new})
        if not new["ok"]:
            out.failures.append(f"capacity.jsonl {tag}: check {row.get('check')} fails")
        if tag == "needle":
            out.failures += _fill_short(run, new["fill"])
    checks = {r.get("check") for r in rows}
    out.failures += [f"check {c}: no result" for c in ("needle", "over_bound") if c not in checks]
    ladder(run, raw, out)
    return out


def _fill_short(run: GateRun, fill: float) -> list[str]:
    """The needle's fill against the fill its plan wants at this bound (the gate's rule)."""
    wanted = needle_plan(run.max_model_len, run.settings).wanted_fill
    if fill_reaches(fill, wanted):
        return []
    return [f"capacity.jsonl needle: filled only {fill:.0%}, {wanted:.0%} wanted"]


def _needle(
    run: GateRun, exchange: dict[str, Any] | None, counted: dict[str, Any] | None
) -> dict[str, Any] | None:
    if status_of(exchange) != 200 or exchange is None:
        return None
    if "chunks" in exchange:  # streamed: the ladder's top row
        chunks, _ = chunks_of(exchange)
        message, finish = stream_message(chunks), stream_finish(chunks)
        used = prompt_count(chunks, counted)[0]
    else:
        response = exchange.get("response")
        usage = (response.get("usage") if isinstance(response, dict) else None) or {}
        message, finish, used = (
            message_of(exchange),
            finish_of(exchange),
            usage.get("prompt_tokens"),
        )
    row, _ = judge_needle(message, finish, used, run.max_model_len, run.settings)
    return row


def _over_bound(run: GateRun, raw: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Gate 06's over-bound check again, by the same pure rule (``checks.overlength``)."""
    over, after = raw.get("over-bound"), raw.get("after-over-bound")
    if over is None or after is None:
        return None
    known = engine_for(run.engine).over_length
    plain = classify(over.get("status"), over.get("response"), over_length=known)
    streamed = None
    if run.settings.get("stream_over_bound"):
        stream = raw.get("over-bound-stream") or {}
        chunks = chunks_of(stream)[0] if "chunks" in stream else None
        streamed = classify(stream.get("status"), stream.get("error_body"), chunks, known)
    problems = over_bound_problems(plain, streamed, after.get("status"))
    new = {"status": over.get("status"), "after_status": after.get("status"), "ok": not problems}
    return new | ({"stream": streamed.as_dict()} if streamed else {})
