"""Gate 05 (tool_calls): each tool_choice mode's call judged again.

From ``tool_calls.jsonl``, a mode's call (a streamed one reassembled by
``checks.toolcalls.reassemble_stream``) runs through ``check_call`` with the engine's expected
finish (``expected_finish``), its arguments against ``arguments_expect``, a streamed mode against
its non-streamed twin (``check_twin``), and the result mode's answer through
``check_uses_result``. The rows re-derived are ``tool_calls_verdicts.jsonl``'s.
"""

from __future__ import annotations

import json
from typing import Any

from tp2qual.checks.toolcalls import (
    check_call,
    check_twin,
    check_uses_result,
    expected_finish,
    reassemble_stream,
)
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
            content = message_of(exchange).get("content") or ""
            verdict = check_uses_result(content, settings["result_expect"])
            problems = [] if verdict.ok else [verdict.reason]
        else:
            problems = _judge_call(run, mode, exchange, raw)
            if mode.endswith("-stream") and f"{mode}-twin" in raw:
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
    tool = run.settings["tool"]
    if mode.endswith("-stream"):
        got = reassemble_stream(chunks_of(exchange)[0])
        calls, finish = got["tool_calls"], got["finish_reason"]
    else:
        calls, finish = message_of(exchange).get("tool_calls"), finish_of(exchange)
    finishes, rule = expected_finish(run.engine, mode)
    verdict = check_call(calls, finish, tool["name"], tool["parameters"], finishes, rule)
    if not verdict.ok:
        return [verdict.reason]
    arguments = json.loads(calls[0]["function"]["arguments"])  # check_call parsed it already
    problems = [
        f"argument {key}={arguments.get(key)!r} does not contain {fragment!r}"
        for key, fragment in run.settings.get("arguments_expect", {}).items()
        if fragment.casefold() not in str(arguments.get(key, "")).casefold()
    ]
    base = mode.removesuffix("-stream")
    if not problems and mode != base and base in run.settings.get("modes", []):
        twin = raw.get(f"{mode}-twin") or {}
        matches = check_twin(got, status_of(twin), twin.get("response"))
        problems += [] if matches.ok else [matches.reason]
    return problems
