"""Gate 05 (tool_calls): each tool_choice mode's call judged again.

From ``tool_calls.jsonl``, a mode's call (a streamed one reassembled by
``checks.toolcalls.reassemble_stream``) is judged by the gate's own rule
(``checks.tool_modes.judge_mode``: the call, its argument values, a streamed mode's twin read
from its record), and the result mode's answer through ``judge_result_answer`` (its ending,
then ``check_uses_result``). The rows re-derived are ``tool_calls_verdicts.jsonl``'s.
"""

from __future__ import annotations

from typing import Any

from tp2qual.checks.tool_modes import judge_mode, judge_result_answer, twin_tag
from tp2qual.checks.toolcalls import reassemble_stream
from tp2qual.evidence.rederive.common import (
    GateRun,
    Rederived,
    by_tag,
    chunks_of,
    finish_of,
    message_of,
    status_of,
)


def tool_calls(run: GateRun) -> Rederived:
    raw = by_tag(run.records("tool_calls.jsonl"))
    settings = run.settings
    out = Rederived(rows={"tool_calls_verdicts.jsonl": []})
    rows = run.records("tool_calls_verdicts.jsonl", required=False)
    for row in rows:
        mode = str(row.get("mode"))
        tag = "result-answer" if mode == "result" else mode
        exchange = raw.get(tag)
        if status_of(exchange) != 200 or exchange is None:
            out.unmatched(
                f"tool_calls.jsonl {tag}", "tool_calls_verdicts.jsonl", row,
                what="exchange", found="no HTTP 200 answer",
            )  # fmt: skip
            continue
        out.records += 1
        if mode == "result":
            # A run recorded before endings were judged names no finish_reasons: its own rule.
            allowed = settings.get("finish_reasons")
            expect = settings["result_expect"]
            verdict = judge_result_answer(
                message_of(exchange), finish_of(exchange), expect, allowed
            )
            problems = [] if verdict.ok else [verdict.reason]
        else:
            problems = _judge_call(run, mode, exchange, raw)
            if mode.endswith("-stream") and twin_tag(mode) in raw:
                out.records += 1  # its non-streamed twin was re-checked too
        new = {"ok": not problems, "problems": problems}
        out.compare(f"tool_calls.jsonl {tag}", "tool_calls_verdicts.jsonl", row, **new)
        out.rows["tool_calls_verdicts.jsonl"].append({**row, **new})
        out.failures += [f"tool_calls.jsonl {tag}: {p}" for p in problems]
    judged = {r.get("mode") for r in rows}
    out.failures += [f"mode {m}: no verdict" for m in settings.get("modes", []) if m not in judged]
    return out


def _judge_call(
    run: GateRun, mode: str, exchange: dict[str, Any], raw: dict[str, dict[str, Any]]
) -> list[str]:
    """What gate 05 decides for one tool_choice mode, from its raw exchange(s)."""
    if mode.endswith("-stream"):
        got = reassemble_stream(chunks_of(exchange)[0])
    else:
        got = {
            "tool_calls": message_of(exchange).get("tool_calls"),
            "finish_reason": finish_of(exchange),
        }

    def twin() -> tuple[int | None, Any]:
        recorded = raw.get(twin_tag(mode)) or {}
        return status_of(recorded), recorded.get("response")

    return judge_mode(mode, got, run.settings, run.engine, twin)[1]
