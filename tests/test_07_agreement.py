"""Gate 07 — agreement: the serve's greedy answers hold up token by token, against itself and
against a reference serve, and its accuracy is judged only where the test has power.

A functional gate: it runs after capacity and before throughput, and a FAIL blocks throughput.
Every request is a plain text completion (``/v1/completions``, no chat template) of a fixed,
shipped and hashed prompt set (``tp2qual/data/agreement_prompts.json``), greedy with neutral
sampling (``gates.completion_body``: no stated penalty), each token with its top-N logprobs; the
arithmetic items are chat requests with the candidate's ``[gates.request]``. Pass means
(``tp2qual.checks.agreement``, tolerances in ``[gates.agreement]``, docs/agreement.md):

- **greedy is argmax**: every chosen token is the top of its own reported distribution;
- **self-consistent**: each answer, reread by the serve (prompt plus answer prefilled, ``echo``
  with logprobs), gets the logprobs it was decoded with — on the shipped prompts and on one
  that fills ``near_bound_fill`` of the context, where a KV-cache fault shows (there, where an
  echo's prompt-logprob peak is not known to fit the serve's memory, a warm decode of the same
  prompt stands in for the reread: ``checks/agreement/near_bound.py``); a second decode of
  each prompt, its prefix now cached, decodes as the cold one did;
- **agrees with the reference** (``[reference] candidate``): vLLM's closeness walk to the first
  differing token, with the gap at that token and the answers' ends; and teacher forced, the
  serve's reread of the reference's answers against the reference's own logprobs at every
  position;
- **accuracy**: the shipped arithmetic items (chat, scored by the last number; an item cut by
  its budget counted, never scored), a drop against the reference's answers by the exact
  one-sided McNemar test, judged only where that test could see ``accuracy_max_drop``; asking
  stops once the outcome is certain. Asked only where a drop can be judged from them
  (``tp2qual.accuracy_asked``: a reference, or a loaded candidate judged against this one, or
  ``accuracy_record_unjudged``); else one ``accuracy_not_asked`` line says why, and none is.

A part that cannot judge says *not judged* and why (the finding's skipped checks, the terminal,
the report): an engine that cannot reread, too few aligned positions, no power. No reference
named: the reference parts are *not applicable*. A named reference with no PASS: *not run*, so
the finding is INCOMPLETE. Either way this serve's own lines are recorded, so that it can be
another candidate's reference (``tp2qual.evidence.reference``).
Artifacts: ``agreement.jsonl`` (every exchange, raw), ``agreement_transcript.jsonl`` (the lines
judged, the reference's copied with its run, the summary last); ``verify`` parses the raw
exchanges again and re-derives every claim (``evidence/rederive/agreement.py``).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

import tp2qual
from tp2qual.accuracy_asked import ItemsAsked, items_asked
from tp2qual.artifacts.claims import read_records
from tp2qual.artifacts.finding import NOT_APPLICABLE, NOT_RUN
from tp2qual.checks.accuracy import score, settled
from tp2qual.checks.agreement import (
    ACCURACY,
    NEAR_BOUND,
    NOT_ASKED,
    OWN,
    REFERENCE,
    REFERENCE_ACCURACY,
    REREAD,
    STOPPED,
    SUMMARY,
    WARM,
)
from tp2qual.checks.agreement.evaluate import evaluate
from tp2qual.checks.agreement.near_bound import ECHO, near_bound_plan
from tp2qual.checks.agreement.rows import (
    MAX_PREFIX_ROWS,
    answer_rows,
    decode_rows,
    gives_no_logprobs,
    no_logprobs_said,
    reread_rows,
)
from tp2qual.checks.agreement.scoring import misread, shift_fit
from tp2qual.engines import engine_for
from tp2qual.evidence.reference import TRANSCRIPT, Reference, find_reference, record_reference
from tp2qual.exceptions import NoLogprobs, SuiteError
from tp2qual.gates import (
    Api,
    Candidate,
    CandidateRecord,
    Claimer,
    Exchange,
    chat_body,
    completion_body,
)
from tp2qual.hooks.candidates import run_key
from tp2qual.rehearsal import echo_fits

pytestmark = pytest.mark.agreement

DATA = Path(tp2qual.__file__).parent / "data"
PROMPT_SET, ARITHMETIC = DATA / "agreement_prompts.json", DATA / "arithmetic_items.json"
SAMPLE_CHARS = 4000  # the near-bound text's sample the engine counts, to size the whole
CHARS_PER_TOKEN = 3.0  # the guess when it gives no count


def test_agrees_with_reference(
    api: Api,
    candidate: Candidate,
    record: CandidateRecord,
    claim: Claimer,
    request: pytest.FixtureRequest,
) -> None:
    began = time.monotonic()
    settings = candidate.gate("agreement")
    shift = engine_for(candidate.engine).reread_shift
    digest, prompts = _load(PROMPT_SET, "prompts")
    prompts = prompts[: settings["prompts"] or None]
    stamp = {"run": record.run_id, "prompt_set_sha256": digest, "candidate": candidate.name}
    for prompt in prompts:
        own = _decode(api, candidate, prompt["id"], prompt["text"], prompt["max_tokens"], settings)
        _write(record, own | stamp)
        _reread(api, candidate, record, "self", own, shift, settings)
        _write(record, _decode(api, candidate, prompt["id"], prompt["text"],
                               prompt["max_tokens"], settings, kind=WARM))  # fmt: skip
    near = _near_bound(api, candidate, settings)
    _write(record, near | stamp)
    if near["check"] == ECHO:
        _reread(api, candidate, record, "self", near, shift, settings)
    else:  # an echo there may exhaust the serve's memory (checks/agreement/near_bound.py)
        _write(record, _decode(api, candidate, NEAR_BOUND, near["prompt"], near["max_tokens"],
                               settings, kind=WARM, prompt_tokens=near["fill_target"]))  # fmt: skip
    reference = _reference(candidate, request, digest)
    if isinstance(reference, Reference):
        record_reference(record, reference)
        _copy_reference(record, reference)
        for line in reference.records:
            if line["kind"] == OWN and line["id"] != NEAR_BOUND:  # forced on the shipped prompts
                _reread(api, candidate, record, "forced", line, shift, settings)
    catalogue = request.config.stash[run_key].candidates  # every file loaded, not the -k
    _ask_items(api, candidate, record, settings, reference, items_asked(candidate, catalogue))
    judged = _summarise(record, settings, claim)
    _say_not_judged(record, judged["not_judged"], shift, candidate.reference is None)
    assert not judged["problems"], "; ".join(judged["problems"])
    if isinstance(reference, str):
        _not_judged(record, NOT_RUN, f"not judged: {reference}", began)


def _load(path: Path, key: str) -> tuple[str, list[dict[str, Any]]]:
    """A shipped set and the sha256 of its bytes."""
    data = path.read_bytes()
    return hashlib.sha256(data).hexdigest(), json.loads(data)[key]


def _reply(reply: Exchange, what: str) -> dict[str, Any]:
    assert reply.status == 200, f"{what}: HTTP {reply.status}: {reply.body}"
    return reply.choice


def _decode(api: Api, candidate: Candidate, pid: str, text: str, max_tokens: int,
            settings: dict[str, Any], kind: str = OWN,
            prompt_tokens: int | None = None) -> dict[str, Any]:  # fmt: skip
    """One greedy continuation with its top-N logprobs, as a transcript line; its deadline
    counts ``prompt_tokens`` of prefill where the gate knows them (else the text's length)."""
    tag = f"{'decode' if kind == OWN else kind}:{pid}"
    body = completion_body(candidate, text, max_tokens=max_tokens, logprobs=settings["top_n"])
    reply = api.complete(tag, body, prompt_tokens=prompt_tokens)
    choice = _reply(reply, tag)
    if gives_no_logprobs(choice.get("logprobs")):  # the suite cannot judge: ERROR, never FAIL
        title = engine_for(candidate.engine).title
        raise NoLogprobs(no_logprobs_said(tag, title, settings["top_n"]), candidate=candidate.name)
    rows = decode_rows(choice.get("logprobs"))
    assert rows, f"{tag}: the reply's token logprobs are unreadable or empty: {choice}"[:600]
    usage = reply.body.get("usage") or {}
    line = {"kind": kind, "id": pid, "tag": tag, "prompt": text, "text": choice.get("text") or ""}
    return line | {"finish_reason": choice.get("finish_reason"), "tokens": rows,
                   "prompt_tokens": usage.get("prompt_tokens")}  # fmt: skip


def _reread(api: Api, candidate: Candidate, record: CandidateRecord, of: str,
            decoded: dict[str, Any], shift: int | None,
            settings: dict[str, Any]) -> None:  # fmt: skip
    """The serve prefills a prompt plus an answer (its own: ``self``; the reference's:
    ``forced``) and gives every token's logprob; the answer's rows become a transcript line."""
    if shift is None:
        return
    tag = f"reread:{of}:{decoded['id']}"
    text = decoded["prompt"] + decoded["text"]
    body = completion_body(candidate, text, max_tokens=1, logprobs=settings["top_n"], echo=True)
    # Every position is prefilled with its top-N logprobs: budgeted as that many tokens, and
    # as that long a prompt.
    positions = int(decoded.get("prompt_tokens") or len(text)) + len(decoded["tokens"])
    timeout = api.budget.seconds_for(positions, positions)
    choice = _reply(api.complete(tag, body, timeout=timeout), tag)
    if gives_no_logprobs(choice.get("logprobs")):  # as in _decode: nothing to judge by
        title = engine_for(candidate.engine).title
        said = no_logprobs_said(tag, title, settings["top_n"], echo=True)
        raise NoLogprobs(said, candidate=candidate.name)
    rows = reread_rows(choice.get("logprobs"), shift, settings["top_n"])
    assert rows is not None, f"{tag}: the reread's token logprobs are unreadable"
    if of == "self":
        _read_as_placed(candidate, tag, decoded, choice.get("logprobs"), shift, settings)
    skip, answer = answer_rows(rows, decoded["prompt"])
    if skip is None:  # no answer to place: never "not judged: 0 positions aligned"
        raise SuiteError(
            f"{tag}: {engine_for(candidate.engine).title}'s echo rows do not spell the prompt "
            f"sent, at their start or after up to {MAX_PREFIX_ROWS} rows of a special prefix "
            f"(a BOS): the suite cannot find where the answer starts; the rows begin "
            f"{[row['token'] for row in rows[:MAX_PREFIX_ROWS]]!r}"[:600]
        )
    _write(record, {"kind": REREAD, "of": of, "id": decoded["id"], "tag": tag, "shift": shift,
                    "prompt_chars": len(decoded["prompt"]),
                    "prefix": "".join(row["token"] for row in rows[:skip]),
                    "tokens": answer or [], "boundary": answer is not None})  # fmt: skip


def _read_as_placed(candidate: Candidate, tag: str, decoded: dict[str, Any], logprobs: Any,
                    shift: int, settings: dict[str, Any]) -> None:  # fmt: skip
    """The suite reads the engine's echo rows where they are: its own answer, reread, fits far
    better at another shift only when the suite misreads them (its error, not the serve's)."""
    fits = shift_fit(decoded["tokens"], logprobs, decoded["prompt"], settings["top_n"])
    if (other := misread(fits, shift)) is not None:
        raise SuiteError(
            f"{tag}: {engine_for(candidate.engine).title} places its echo rows at shift {other} "
            f"(mean |Δ| {fits[other]}), not {shift} as the suite reads them ({fits[shift]}): "
            "Engine.reread_shift does not hold for this serve"
        )


def _near_bound(api: Api, candidate: Candidate, settings: dict[str, Any]) -> dict[str, Any]:
    """A prompt filling ``near_bound_fill`` of the context (the arithmetic items' questions,
    repeated), sized by the engine's own token count of a first guess."""
    _, items = _load(ARITHMETIC, "items")
    source = " ".join(item["question"] for item in items)
    sized = near_bound_plan(candidate.max_model_len, settings)
    fits, why = echo_fits(candidate, sized.prompt_tokens + sized.max_tokens)
    plan = near_bound_plan(candidate.max_model_len, settings, fits)
    target, budget = plan.prompt_tokens, plan.max_tokens
    sample = completion_body(candidate, source[:SAMPLE_CHARS], max_tokens=1)
    sized = api.complete("size:near-bound", sample)
    _reply(sized, "size:near-bound")
    counted = int((sized.body.get("usage") or {}).get("prompt_tokens") or 0)
    chars = int(target * (SAMPLE_CHARS / counted if counted else CHARS_PER_TOKEN))
    text = (source * (chars // len(source) + 1))[:chars].rsplit(" ", 1)[0] + "\nSummary:"
    near = _decode(api, candidate, NEAR_BOUND, text, budget, settings, prompt_tokens=target)
    return near | {"fill_target": target, "max_tokens": budget, "check": plan.check,
                   "check_why": why}  # fmt: skip


def _reference(candidate: Candidate, request: pytest.FixtureRequest,
               digest: str) -> Reference | str | None:  # fmt: skip
    if candidate.reference is None:
        return None
    return find_reference(request.config.stash[run_key], candidate.reference, digest)


def _copy_reference(record: CandidateRecord, reference: Reference) -> None:
    """The reference's lines beside ours, with where they came from: the artifact alone
    re-derives every claim."""
    for line in reference.records:
        kind = REFERENCE if line["kind"] == OWN else REFERENCE_ACCURACY
        copied = {**line, "kind": kind, "candidate": reference.candidate}
        _write(record, copied | {"run": reference.run, "source": reference.source})


def _ask_items(api: Api, candidate: Candidate, record: CandidateRecord, settings: dict[str, Any],
               reference: Reference | str | None, asked: ItemsAsked) -> None:  # fmt: skip
    """The first ``accuracy_items`` arithmetic items, each scored by its last number (an item
    its budget cut is not scored); against a reference, asking stops once the drop test's
    outcome cannot change. None where no drop can be judged from them: one line says why."""
    if not asked.asked:
        _write(record, {"kind": NOT_ASKED, "why": asked.why, "referrers": list(asked.referrers)})
        return
    digest, items = _load(ARITHMETIC, "items")
    items = items[: settings["accuracy_items"]]
    theirs = {}
    if isinstance(reference, Reference):
        theirs = {r["id"]: r.get("correct") for r in reference.records
                  if r.get("kind") == ACCURACY and r.get("items_sha256") == digest}  # fmt: skip
    own: dict[str, bool | None] = {}
    for n, item in enumerate(items):
        if theirs and (why := settled(own, theirs, len(items) - n, settings["accuracy_alpha"])):
            _write(record, {"kind": STOPPED, "after": n, "why": why})
            return
        question = f"{item['question']} Give the final answer as a number."
        body = chat_body(candidate, question, max_tokens=settings["accuracy_max_tokens"])
        reply = api.chat(f"item:{item['id']}", body)
        assert reply.status == 200, f"{item['id']}: HTTP {reply.status}: {reply.body}"
        text, finish = reply.message.get("content"), reply.finish_reason
        own[item["id"]] = None if finish == "length" else score(text, item["answer"])
        _write(record, {"kind": ACCURACY, "id": item["id"], "items_sha256": digest,
                        "answer": item["answer"], "text": text, "finish_reason": finish,
                        "correct": own[item["id"]]})  # fmt: skip


def _write(record: CandidateRecord, line: dict[str, Any]) -> None:
    record.evidence.append_jsonl(TRANSCRIPT, line)


def _records(record: CandidateRecord) -> list[dict[str, Any]]:
    return read_records(record.evidence.root / TRANSCRIPT)


def _summarise(record: CandidateRecord, settings: dict[str, Any], claim: Claimer) -> dict[str, Any]:
    """The summary line (last), from the transcript's lines by the rule verify runs again, and
    one claim per figure read back from it."""
    judged = evaluate(_records(record), settings)
    _write(record, {"kind": SUMMARY, **judged.claims})
    for name in judged.claims:
        claim(name, TRANSCRIPT, op="field", path=name)
    return {"problems": judged.problems, "not_judged": judged.not_judged}


def _say_not_judged(record: CandidateRecord, parts: dict[str, str], shift: int | None,
                    unnamed: bool) -> None:  # fmt: skip
    """Each part that could not judge, with why, among the gate's skipped checks."""
    result = record.gates["agreement"]
    if unnamed:
        parts = parts | {"agreement with a reference": f"{NOT_APPLICABLE}: no reference named "
                         "([reference] candidate)"}  # fmt: skip
    if shift is None:
        result.skipped["self-consistency"] = (
            f"not judged: {engine_for(record.candidate.engine).title} cannot reread a prompt "
            "with its logprobs (echo), so neither self-consistency nor teacher forcing runs"
        )
    result.skipped |= parts
    record.save()


def _not_judged(record: CandidateRecord, outcome: str, reason: str, began: float) -> None:
    """Say in the finding why agreement with a reference was not judged, then skip (pytest's
    skip alone would leave the gate looking passed, and its time uncounted)."""
    result = record.gates["agreement"]
    result.outcome, result.reason = outcome, reason
    result.seconds += time.monotonic() - began
    record.save()
    pytest.skip(reason)
