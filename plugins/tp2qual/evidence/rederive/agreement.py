"""Gate 07 (agreement): the transcript's summary line derived again from its own lines.

``checks.agreement.rederive`` reads the claims again from the own, reference and accuracy lines
of ``agreement_transcript.jsonl``; the summary line recorded there is compared with them.
"""

from __future__ import annotations

from typing import Any

from tp2qual.checks import agreement as agreement_check
from tp2qual.evidence.rederive.common import GateRun, Rederived


def agreement(run: GateRun) -> Rederived:
    """The summary line of ``agreement_transcript.jsonl`` (where every claim is read from),
    derived again from the transcript's own, reference and accuracy lines."""
    records = run.records("agreement_transcript.jsonl")
    body = [r for r in records if r.get("kind") != agreement_check.SUMMARY]
    recorded: dict[str, Any] = next(
        (r for r in reversed(records) if r.get("kind") == agreement_check.SUMMARY), {}
    )
    claims = agreement_check.rederive(body, run.settings)
    out = Rederived(records=len(body))
    where = "agreement_transcript.jsonl"
    out.compare(where, f"{where} summary", recorded, **claims)
    summary = {**recorded, **claims, "kind": agreement_check.SUMMARY}
    out.rows["agreement_transcript.jsonl"] = [*body, summary]
    if claims.get("agrees_with_reference") is False:
        out.failures.append("the transcript does not agree with its reference's")
    return out
