"""Gate 07 — agreement with a reference serve.

A functional gate: it runs after capacity and before throughput, and a FAIL blocks throughput.
Pass means: the greedy continuations (temperature 0, the candidate's ``[gates.request]``
sampling) of a fixed, shipped and hashed prompt set (``tp2qual/data/agreement_prompts.json``:
short factual, arithmetic, code, long-form, multi-turn), each token with its top-N logprobs,
agree with the reference serve's by vLLM's ``check_logprobs_close`` rule
(``tp2qual.checks.agreement``): at the first differing token each side's token is in the other's
top N, and over the common prefix the chosen tokens' logprobs differ by at most the stated
tolerance (``[gates.agreement]``). Beside it, accuracy: the first ``accuracy_items`` of a shipped,
hashed set of generated arithmetic word problems (``tp2qual.checks.accuracy``), scored by the
last number of the answer, with a Wilson interval; against the reference's answers to the same
items, a drop significant by the exact one-sided McNemar test at ``accuracy_alpha`` fails.
The reference is ``[reference] candidate`` (a lane: its baseline): that candidate's transcript
from this run if it passed here, else from the newest dated run under the results folder where
it PASSED (``tp2qual.evidence.reference``). No reference named: *not applicable*, said in the
finding and the terminal. A named reference with no PASS anywhere: *not run* (not judged), so
the finding is INCOMPLETE, never PASS. Either way this serve's own transcript is recorded, so
that it can be another candidate's reference.
Artifacts: ``agreement_transcript.jsonl``: this serve's lines and scored items, the reference's
copied with their run, one comparison per prompt, and a summary last; every claim re-derives
from it alone (``checks.agreement.rederive``).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, NoReturn

import pytest

import tp2qual
from tp2qual.checks.accuracy import score
from tp2qual.checks.agreement import (
    ACCURACY,
    COMPARISON,
    OWN,
    REFERENCE,
    REFERENCE_ACCURACY,
    SUMMARY,
    Tolerances,
    accuracy_verdict,
    judge,
    rederive,
    tokens_from_logprobs,
)
from tp2qual.evidence.claims import read_records
from tp2qual.evidence.finding import NOT_APPLICABLE, NOT_RUN
from tp2qual.evidence.reference import TRANSCRIPT, Reference, find_reference
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer, chat_body
from tp2qual.hooks.candidates import run_key

pytestmark = pytest.mark.agreement

DATA = Path(tp2qual.__file__).parent / "data"
PROMPT_SET, ARITHMETIC = DATA / "agreement_prompts.json", DATA / "arithmetic_items.json"


def test_agrees_with_reference(
    api: Api,
    candidate: Candidate,
    record: CandidateRecord,
    claim: Claimer,
    request: pytest.FixtureRequest,
) -> None:
    began = time.monotonic()
    settings = candidate.gate("agreement")
    digest, prompts = _load(PROMPT_SET, "prompts")
    for prompt in prompts:
        line = _continue(api, candidate, prompt, settings)
        record.evidence.append_jsonl(
            TRANSCRIPT, line | {"run": record.run_id, "prompt_set_sha256": digest}
        )
    _score_arithmetic(api, candidate, record, settings)
    if candidate.reference is None:
        _summarise(record, settings, claim)
        _not_judged(record, NOT_APPLICABLE, "no reference named ([reference] candidate)", began)
    reference = find_reference(request.config.stash[run_key], candidate.reference, digest)
    if isinstance(reference, str):
        _summarise(record, settings, claim)
        _not_judged(record, NOT_RUN, f"not judged: {reference}", began)
    _copy_reference(record, reference)
    records = _records(record)
    own = [r for r in records if r["kind"] == OWN]
    ref = [r for r in records if r["kind"] == REFERENCE]
    lines, agreement = judge(own, ref, Tolerances.from_mapping(settings))
    for line in lines:
        record.evidence.append_jsonl(TRANSCRIPT, line)
    _summarise(record, settings, claim)
    accuracy = accuracy_verdict(records, settings, with_reference=True)
    problems = [v.reason for v in (agreement, accuracy) if v is not None and not v.ok]
    assert not problems, f"against {reference.candidate} ({reference.source}): " + "; ".join(
        problems
    )


def _load(path: Path, key: str) -> tuple[str, list[dict[str, Any]]]:
    """A shipped set and the sha256 of its bytes."""
    data = path.read_bytes()
    return hashlib.sha256(data).hexdigest(), json.loads(data)[key]


def _score_arithmetic(
    api: Api, candidate: Candidate, record: CandidateRecord, settings: dict[str, Any]
) -> None:
    """The first ``accuracy_items`` arithmetic items, each scored by its last number (none
    asked: no line, and no accuracy claim)."""
    digest, items = _load(ARITHMETIC, "items")
    for item in items[: settings["accuracy_items"]]:
        question = f"{item['question']} Give the final answer as a number."
        body = chat_body(candidate, question, max_tokens=settings["accuracy_max_tokens"])
        reply = api.chat(item["id"], body)
        assert reply.status == 200, f"{item['id']}: HTTP {reply.status}: {reply.body}"
        text = reply.message.get("content")
        record.evidence.append_jsonl(
            TRANSCRIPT,
            {
                "kind": ACCURACY,
                "id": item["id"],
                "items_sha256": digest,
                "answer": item["answer"],
                "text": text,
                "correct": score(text, item["answer"]),
            },
        )


def _continue(
    api: Api, candidate: Candidate, prompt: dict[str, Any], settings: dict[str, Any]
) -> dict[str, Any]:
    """One greedy continuation with its top-N logprobs, as a transcript line."""
    body = chat_body(
        candidate,
        prompt["messages"],
        max_tokens=prompt["max_tokens"],
        logprobs=True,
        top_logprobs=settings["top_n"],
    )
    reply = api.chat(prompt["id"], body)
    assert reply.status == 200, f"{prompt['id']}: HTTP {reply.status}: {reply.body}"
    tokens = tokens_from_logprobs(reply.body["choices"][0].get("logprobs"))
    assert tokens, (
        f"{prompt['id']}: no token logprobs in the reply (asked logprobs: true, top_logprobs: "
        f"{settings['top_n']}); this rule cannot judge the serve without them"
    )
    return {
        "kind": OWN,
        "id": prompt["id"],
        "candidate": candidate.name,
        "text": reply.message.get("content"),
        "finish_reason": reply.finish_reason,
        "tokens": tokens,
    }


def _copy_reference(record: CandidateRecord, reference: Reference) -> None:
    """The reference's lines beside ours, with where they came from: the artifact alone
    re-derives every claim."""
    for line in reference.records:
        kind = REFERENCE if line["kind"] == OWN else REFERENCE_ACCURACY
        copied = {**line, "kind": kind, "candidate": reference.candidate}
        copied |= {"run": reference.run, "source": reference.source}
        record.evidence.append_jsonl(TRANSCRIPT, copied)


def _records(record: CandidateRecord) -> list[dict[str, Any]]:
    return read_records(record.evidence.root / TRANSCRIPT)


def _summarise(record: CandidateRecord, settings: dict[str, Any], claim: Claimer) -> None:
    """The summary line (last), and one claim per figure read back from it."""
    records = _records(record)
    claims = rederive(records, settings)
    divergences = [
        {"id": r["id"], **r["divergence"]}
        for r in records
        if r.get("kind") == COMPARISON and r["divergence"]
    ]
    record.evidence.append_jsonl(
        TRANSCRIPT, {"kind": SUMMARY, **claims, "first_divergences": divergences}
    )
    for name in claims:
        claim(name, TRANSCRIPT, op="field", path=name)


def _not_judged(record: CandidateRecord, outcome: str, reason: str, began: float) -> NoReturn:
    """Say in the finding why agreement was not judged, then skip (pytest's skip alone would
    leave the gate looking passed, and its time uncounted)."""
    result = record.gates["agreement"]
    result.outcome, result.reason = outcome, reason
    result.seconds += time.monotonic() - began
    record.save()
    pytest.skip(reason)
