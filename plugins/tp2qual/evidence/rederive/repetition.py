"""Gate 04 (repetition): each long output judged again for degenerate loops.

From ``repetition.jsonl``, each prompt's output runs through the gate's rule
(``checks.repetition.judge_long_output``: its ending, then loops over reasoning and answer) with
the recorded thresholds and finish reasons; the decision (``ok``) of each
``repetition_metrics.jsonl`` row is compared, not its measures.
"""

from __future__ import annotations

from tp2qual.checks.repetition import Thresholds, judge_long_output
from tp2qual.evidence.rederive.common import (
    GateRun,
    Rederived,
    by_tag,
    finish_of,
    message_of,
    status_of,
)


def repetition(run: GateRun) -> Rederived:
    raw = by_tag(run.records("repetition.jsonl"))
    thresholds = Thresholds.from_mapping(run.settings.get("thresholds") or {})
    out = Rederived(rows={"repetition_metrics.jsonl": []})
    rows = run.records("repetition_metrics.jsonl", required=False)
    for row in rows:
        tag = f"long#{row.get('prompt')}"
        exchange = raw.get(tag)
        if status_of(exchange) != 200 or exchange is None:
            out.unmatched(
                f"repetition.jsonl {tag}", "repetition_metrics.jsonl", row,
                what="exchange", found="no HTTP 200 answer",
            )  # fmt: skip
            continue
        out.records += 1
        # A run recorded before endings were judged names no finish_reasons: its own rule.
        allowed = run.settings.get("finish_reasons")
        verdict = judge_long_output(message_of(exchange), finish_of(exchange), thresholds, allowed)
        # The decision is compared, not the measures: the gate measured the text before the
        # evidence redacted any secret in it, and a redaction changes lengths and ratios.
        out.compare(f"repetition.jsonl {tag}", "repetition_metrics.jsonl", row, ok=verdict.ok)
        out.rows["repetition_metrics.jsonl"].append({**row, "ok": verdict.ok})
        if not verdict.ok:
            out.failures.append(f"repetition.jsonl {tag}: {verdict.reason}")
    expected = len(run.settings.get("prompts", []))
    if len(rows) < expected:
        out.failures.append(f"{len(rows)} of {expected} prompts have a verdict")
    return out
