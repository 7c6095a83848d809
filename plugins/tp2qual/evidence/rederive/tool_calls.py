"""Gate 05 (tool_calls): each call of each tool_choice mode judged again, and each mode's power.

From ``tool_calls.jsonl``, every call (a mode's k-th under its tag, ``checks.tool_modes.call_tag``;
a streamed one reassembled by ``checks.toolcalls.reassemble_stream``) is judged by the gate's own
rule (``checks.tool_modes.judge_mode``: the call, its argument values, a streamed call's twin
read from its record), the result mode's answers through ``judge_result_answer`` (their ending,
then ``check_uses_result``), and the call after a long prompt (``long``) by ``judge_long``, its
fill from the raw reply's ``usage.prompt_tokens``. The rows re-derived are
``tool_calls_verdicts.jsonl``'s; then each mode's calls, as re-derived, are judged together again
(``checks.tool_power.judge_repeats``: failed calls, the failure rate excluded, judged or "not
judged: no power") against ``tool_calls_power.jsonl``, and a passed mode must have made the
``repeats`` calls the run's settings asked. A run recorded before repeats (no ``tag``, no power
rows) is judged as it was: one call per mode under the mode's name.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from tp2qual.checks.tool_modes import judge_long, judge_mode, judge_result_answer, twin_tag
from tp2qual.checks.tool_power import judge_repeats
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

VERDICTS, POWER = "tool_calls_verdicts.jsonl", "tool_calls_power.jsonl"


def tool_calls(run: GateRun) -> Rederived:
    raw = by_tag(run.records("tool_calls.jsonl"))
    out = Rederived(rows={VERDICTS: [], POWER: []})
    rows = run.records(VERDICTS, required=False)
    calls: dict[str, list[list[str]]] = defaultdict(list)  # mode -> each call's problems
    for row in rows:
        mode = str(row.get("mode"))
        tag = str(row.get("tag") or ("result-answer" if mode == "result" else mode))
        exchange = raw.get(tag)
        if status_of(exchange) != 200 or exchange is None:
            out.unmatched(
                f"tool_calls.jsonl {tag}", VERDICTS, row,
                what="exchange", found="no HTTP 200 answer",
            )  # fmt: skip
            calls[mode].append(list(row.get("problems") or ["no HTTP 200 answer"]))
            continue
        out.records += 1
        problems, extra = _judge(run, mode, tag, exchange, raw, out)
        new = {"ok": not problems, "problems": problems, **extra}
        out.compare(f"tool_calls.jsonl {tag}", VERDICTS, row, **new)
        out.rows[VERDICTS].append({**row, **new})
        out.failures += [f"tool_calls.jsonl {tag}: {p}" for p in problems]
        calls[mode].append(problems)
    judged = {r.get("mode") for r in rows}
    out.failures += [
        f"mode {m}: no verdict" for m in run.settings.get("modes", []) if m not in judged
    ]
    _power(run, calls, out)
    return out


def _judge(
    run: GateRun,
    mode: str,
    tag: str,
    exchange: dict[str, Any],
    raw: dict[str, dict[str, Any]],
    out: Rederived,
) -> tuple[list[str], dict[str, Any]]:
    """One call's problems, and the row's figures the raw exchange gives (the long call's fill)."""
    if mode == "result":
        # A run recorded before endings were judged names no finish_reasons: its own rule.
        allowed = run.settings.get("finish_reasons")
        verdict = judge_result_answer(
            message_of(exchange), finish_of(exchange), run.settings["result_expect"], allowed
        )
        return ([] if verdict.ok else [verdict.reason]), {}
    if mode == "long":
        got = {"tool_calls": message_of(exchange).get("tool_calls"),
               "finish_reason": finish_of(exchange)}  # fmt: skip
        used = ((exchange.get("response") or {}).get("usage") or {}).get("prompt_tokens")
        _, problems, row = judge_long(got, run.settings, run.engine, used, run.max_model_len)
        return problems, {k: row[k] for k in ("prompt_tokens", "fill")}
    if mode.endswith("-stream") and twin_tag(tag) in raw:
        out.records += 1  # its non-streamed twin was re-checked too
    return _judge_call(run, mode, tag, exchange, raw), {}


def _power(run: GateRun, calls: dict[str, list[list[str]]], out: Rederived) -> None:
    """Each mode's calls judged together again, against its recorded power row; a passed mode
    made the calls the run asked for."""
    tolerance = float(run.settings.get("max_failure_rate", 0.2))
    asked = int(run.settings.get("repeats", 1))
    for row in run.records(POWER, required=False):
        mode = str(row.get("mode"))
        verdict = judge_repeats(mode, calls.get(mode, []), float(row.get("tolerance", tolerance)))
        keys = ("calls", "failed", "failed_calls", "excluded_failure_rate", "judged")
        new = {"ok": verdict.ok, **{k: verdict.measures.get(k) for k in keys}}
        out.compare(f"{VERDICTS} {mode}", POWER, row, **new)
        out.rows[POWER].append({**row, **new})
        if not verdict.ok:
            out.failures.append(f"{POWER} {mode}: {verdict.reason}")
        elif verdict.measures["calls"] != asked:
            out.failures.append(f"{POWER} {mode}: {verdict.measures['calls']} calls, {asked} asked")


def _judge_call(
    run: GateRun, mode: str, tag: str, exchange: dict[str, Any], raw: dict[str, dict[str, Any]]
) -> list[str]:
    """What gate 05 decides for one call of a tool_choice mode, from its raw exchange(s)."""
    if mode.endswith("-stream"):
        got = reassemble_stream(chunks_of(exchange)[0])
    else:
        got = {
            "tool_calls": message_of(exchange).get("tool_calls"),
            "finish_reason": finish_of(exchange),
        }

    def twin() -> tuple[int | None, Any]:
        recorded = raw.get(twin_tag(tag)) or {}
        return status_of(recorded), recorded.get("response")

    return judge_mode(mode, got, run.settings, run.engine, twin)[1]
