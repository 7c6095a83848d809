"""Gate 07 (agreement): every transcript line parsed again from its raw exchange, and the
summary derived again from the lines by the gate's own rule (``checks.agreement.evaluate``).

The serve's lines (decodes, warm decodes, rereads) name the exchange they came from (``tag``
in ``agreement.jsonl``); each is parsed again from that exchange's raw response
(``checks.agreement.rows``), so a line the gate wrote about itself and the engine never said is
a mismatch. The reference's lines were copied from its own run, with their run named; the
summary's claims are compared with ``evaluate`` of the lines. Accuracy items are re-scored
from their replies and the early stop recomputed (``accuracy_items``); where the transcript says
none was asked, none may be there.

A gate cut short (a request timed out or failed part-way through its prompts) wrote no summary:
the lines it did write are parsed again as ever, nothing is judged from a summary that is not
there, and the check is judged failed at the cut, which is named (``Rederived.cut``: the first
exchange with no answer or one other than HTTP 200, else the last one asked).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tp2qual.checks.agreement import OWN, REREAD, SUMMARY, WARM
from tp2qual.checks.agreement.evaluate import evaluate
from tp2qual.checks.agreement.rows import answer_rows, decode_rows, reread_rows
from tp2qual.checks.verdict import Verdict
from tp2qual.evidence.rederive.accuracy_items import check_not_asked, check_stop, rescore
from tp2qual.evidence.rederive.common import GateRun, Rederived, by_tag

TRANSCRIPT, EXCHANGES = "agreement_transcript.jsonl", "agreement.jsonl"


TEST = "test_agrees_with_reference"


def agreement(run: GateRun) -> Rederived:
    records = run.records(TRANSCRIPT)
    body = [r for r in records if r.get("kind") != SUMMARY]
    summary = next((r for r in reversed(records) if r.get("kind") == SUMMARY), None)
    raw = run.records(EXCHANGES)
    exchanges = by_tag(raw)
    out = Rederived(records=len(exchanges))
    for line in body:
        if line.get("kind") in (OWN, WARM, REREAD):
            _reparse(line, exchanges.get(str(line.get("tag"))), out)
    body = rescore(body, exchanges, out)  # accuracy items judged from their replies
    check_stop(body, run.settings, out)
    check_not_asked(body, exchanges, out)  # none asked: no item line, stop or exchange
    if summary is None:  # stopped before judging: never re-derived as passed
        out.cut = cut_at(raw)
        out.rows[TRANSCRIPT] = body
        said = f"cut short {out.cut}: the transcript has no summary, nothing was judged"
        out.judged(TEST, Verdict.failed(said), TRANSCRIPT, exchange=True)
        return out
    recorded: dict[str, Any] = summary
    judged = evaluate(body, run.settings)
    out.compare(TRANSCRIPT, f"{TRANSCRIPT} summary", recorded, **judged.claims)
    out.rows[TRANSCRIPT] = [*body, {**recorded, **judged.claims, "kind": SUMMARY}]
    verdict = Verdict.failed("; ".join(judged.problems)) if judged.problems else Verdict.passed()
    out.judged(TEST, verdict, TRANSCRIPT, exchange=True)
    return out


def cut_at(exchanges: list[dict[str, Any]]) -> str:
    """Where the gate stopped: at the first exchange with no answer (a timeout, a transport
    error) or one other than HTTP 200, else after the last one it asked."""
    for n, exchange in enumerate(exchanges, 1):
        status = exchange.get("status")
        if exchange.get("error") or not isinstance(exchange.get("response"), Mapping):
            waited = exchange.get("timeout_s")
            within = f" within {float(waited):.0f} s" if isinstance(waited, int | float) else ""
            why = f"no answer{within} ({exchange.get('error') or 'none recorded'})"
        elif status != 200:
            why = f"HTTP {status}"
        else:
            continue
        return f"at {exchange.get('tag')}, exchange {n} of {len(exchanges)}: {why}"
    last = exchanges[-1].get("tag") if exchanges else None
    return f"after {last}, its last exchange" if last else "before its first exchange"


def _reparse(line: Mapping[str, Any], exchange: Mapping[str, Any] | None, out: Rederived) -> None:
    where = f"{TRANSCRIPT} {line.get('tag')}"
    response = (exchange or {}).get("response")
    if not isinstance(response, Mapping):
        out.compare(EXCHANGES, where, {"exchange": "recorded"}, exchange="missing")
        return
    choice = (response.get("choices") or [{}])[0]
    logprobs = choice.get("logprobs") if isinstance(choice, Mapping) else None
    if line.get("kind") == REREAD:
        body = ((exchange or {}).get("request") or {}).get("body", {})
        rows = reread_rows(logprobs, int(line.get("shift") or 0), int(body.get("logprobs") or 0))
        # The prompt is the text sent up to the line's prompt_chars: the rule the gate placed
        # the answer by, past any special prefix (a BOS) the engine echoed before it.
        prompt = str(body.get("prompt") or "")[: int(line.get("prompt_chars") or 0)]
        parsed = answer_rows(rows or [], prompt)[1] or []
        out.compare(EXCHANGES, where, {"tokens": line.get("tokens")}, tokens=parsed)
        return
    text = choice.get("text") if isinstance(choice, Mapping) else None
    fields = {"tokens": decode_rows(logprobs), "text": text or ""}
    fields["finish_reason"] = choice.get("finish_reason") if isinstance(choice, Mapping) else None
    if line.get("kind") == OWN:  # the near-bound prompt's line too
        fields["prompt"] = ((exchange or {}).get("request") or {}).get("body", {}).get("prompt")
    out.compare(EXCHANGES, where, {k: line.get(k) for k in fields}, **fields)
