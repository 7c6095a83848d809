"""Gate 06 (capacity): the needle near the bound and the over-bound request judged again.

From ``capacity.jsonl``, the needle's answer is held to its budget and expected answer
(``checks.answers.check_budget``, ``check_answer``) and its prompt's fill of the context
measured; the over-bound request, its streamed form and the request after it are classified by
the engine's over-length rule (``checks.overlength.classify``, ``over_bound_problems``). The
rows re-derived are ``capacity_results.jsonl``'s.
"""

from __future__ import annotations

from typing import Any

from tp2qual.checks.answers import check_answer, check_budget, split_reasoning
from tp2qual.checks.overlength import classify, over_bound_problems
from tp2qual.engines import engine_for
from tp2qual.evidence.rederive.common import (
    GateRun,
    Rederived,
    by_tag,
    chunks_of,
    finish_of,
    message_of,
    status_of,
)


def capacity(run: GateRun) -> Rederived:
    raw = by_tag(run.records("capacity.jsonl"))
    out = Rederived(rows={"capacity_results.jsonl": []})
    rows = run.records("capacity_results.jsonl", required=False)
    for row in rows:
        if row.get("check") == "needle":
            tag, new = "needle", _needle(run, raw.get("needle"))
        else:
            tag, new = "over-bound", _over_bound(run, raw)
            if new is not None and "stream" not in row:  # a run from before the stream record:
                new.pop("stream", None)  # its verdict (ok) is still re-derived and compared
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
        if tag == "needle" and new["fill"] < run.settings["fill"] - 0.05:
            out.failures.append(f"capacity.jsonl needle: filled only {new['fill']:.0%}")
    checks = {r.get("check") for r in rows}
    out.failures += [f"check {c}: no result" for c in ("needle", "over_bound") if c not in checks]
    return out


def _needle(run: GateRun, exchange: dict[str, Any] | None) -> dict[str, Any] | None:
    if status_of(exchange) != 200 or exchange is None:
        return None
    used = (exchange["response"].get("usage") or {}).get("prompt_tokens")
    text, reasoning = split_reasoning(message_of(exchange))
    budget = run.settings["needle_max_tokens"]
    verdict = check_budget(text, reasoning, finish_of(exchange), budget)
    answer = run.settings.get("needle_answer", "Lisbon")
    verdict = check_answer(text, [answer]) if verdict.ok else verdict
    fill = used / run.max_model_len if isinstance(used, int) else 0.0
    return {"prompt_tokens": used, "fill": fill, "answer": text, "expect": answer, "ok": verdict.ok}


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
