"""Gate 06 — context capacity.

Pass means: a needle is retrieved on every row of a context ladder — prompts at fixed sizes up
to the bound (``perf.ladder.ladder_plan``: the needle near the bound, ``fill`` of it, about
90 %, where the reply budget still fits beside it, ``checks.needle.needle_plan``; then each of
``ladder_fractions`` of the bound and each of ``ladder_tokens`` the bound holds, no larger than
fits beside the budget, near-duplicates one row). Each row is one streamed request; its actual
prompt tokens (the stream's usage, else a plain request counting the same prompt), TTFT to the
first output and to the first visible text, effective prefill rate (prompt tokens / TTFT,
queueing included) and decode rate are recorded in ``capacity_ladder.jsonl``, never judged. A
row whose needle is missed fails the gate, named. The top row's prompt must fill the bound as
its plan wants (``checks.needle.fill_reaches``). A prompt over the bound is rejected cleanly —
an HTTP 4xx with a JSON error body, or streamed, the engine's error as the answer of an HTTP
200 stream (SGLang's way, recorded as such); not a 5xx and not a silent truncation — and the
server still answers afterwards (``checks/overlength.py``). The KV capacity is recorded
where the engine exposes it. Prompt lengths are calibrated on the server's own token counts.
"""

from __future__ import annotations

from typing import Any

import pytest

from tp2qual.checks.needle import fill_reaches, judge_needle, needle_answer, needle_plan
from tp2qual.checks.overlength import classify, over_bound_problems
from tp2qual.engines import engine_for
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer, Server, chat_body
from tp2qual.perf.ladder import (
    COUNT_SUFFIX,
    LADDER_FILE,
    NEEDLE_TAG,
    Rung,
    ladder_misses,
    ladder_plan,
    ladder_row,
    prompt_count,
    stream_message,
)
from tp2qual.perf.sampling import stream_finish
from tp2qual.prompts import Calibration, calibrate, filler

pytestmark = pytest.mark.capacity

NEEDLE = "Remember this: the secret city is {answer}."
QUESTION = "What is the secret city? Answer with the city name only."


def _ask(candidate: Candidate, content: str, max_tokens: int = 16, **fields: object) -> dict:
    return chat_body(candidate, content, max_tokens=max_tokens, **fields)


@pytest.fixture(scope="module")
def calibration(server: Server, candidate: Candidate) -> Calibration:
    api = server.api("capacity.jsonl", "capacity")
    seen = []
    for sentences in (8, 24):
        reply = api.chat(f"calibrate-{sentences}", _ask(candidate, filler(sentences), 1))
        assert reply.status == 200, f"calibration: HTTP {reply.status}: {reply.body}"
        seen.append((sentences, reply.usage("prompt_tokens")))
    return calibrate(*seen)


def _climb(
    api: Api, candidate: Candidate, calibration: Calibration, rung: Rung, record: CandidateRecord
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """One row of the ladder: the needle in the middle of a prompt of the rung's size, asked
    streamed, its figures appended to ``capacity_ladder.jsonl`` (``perf.ladder.ladder_row``)."""
    settings = candidate.gate("capacity")
    budget = needle_plan(candidate.max_model_len, settings).budget
    total = calibration.sentences_for(rung.prompt_tokens)
    half = total // 2
    needle = NEEDLE.format(answer=needle_answer(settings))
    # Each row opens with its own words, so no row's prefix is another's cached prefix.
    opening = f"Notes for {rung.tag}:"
    body = " ".join([opening, filler(half), needle, filler(total - half, start=half + 1)])
    content = f"{body} {QUESTION}"
    # Its deadline counts the prompt's prefill (budget.py), not only the reply: at most what
    # fits beside the budget (the calibration may count a long prompt short).
    most = candidate.max_model_len - budget
    usage = {"stream_options": {"include_usage": True}}
    stream = api.stream_chat(
        rung.tag, _ask(candidate, content, budget, **usage), prompt_tokens=most
    )
    assert stream.status == 200, f"{rung.tag}: HTTP {stream.status}: {stream.error_body}"
    counted = None
    if prompt_count(stream.chunks, None)[0] is None:  # llama-cpp-python streams no usage
        plain = api.chat(rung.tag + COUNT_SUFFIX, _ask(candidate, content, 1), prompt_tokens=most)
        plain.usage("prompt_tokens")  # a count answer without one is malformed: the candidate's
        counted = {"status": plain.status, "response": plain.body}
    prompt = prompt_count(stream.chunks, counted)
    row = ladder_row(rung, stream.chunks, stream.times, prompt, candidate.max_model_len, settings)
    record.evidence.append_jsonl(LADDER_FILE, row)
    return row, stream.chunks


def test_needle_found_on_every_row_of_the_ladder(
    api: Api, candidate: Candidate, calibration: Calibration, record: CandidateRecord
) -> None:
    """The ladder's rows below the needle's, smallest first (the needle's row, the top, is the
    next test's: asked after them, so no row bears the first long prompt's cost alone)."""
    plan = ladder_plan(candidate.max_model_len, candidate.gate("capacity"))
    rows = [
        _climb(api, candidate, calibration, rung, record)[0]
        for rung in plan.rungs
        if rung.tag != NEEDLE_TAG
    ]
    missed = ladder_misses(rows)
    assert not missed, "needle missed on the ladder: " + "; ".join(missed)


def test_needle_found_near_the_bound(
    api: Api,
    candidate: Candidate,
    calibration: Calibration,
    record: CandidateRecord,
    claim: Claimer,
) -> None:
    settings = candidate.gate("capacity")
    plan = needle_plan(candidate.max_model_len, settings)  # the rule verify re-derives by
    top = next(r for r in ladder_plan(candidate.max_model_len, settings).rungs
               if r.tag == NEEDLE_TAG)  # fmt: skip
    climbed, chunks = _climb(api, candidate, calibration, top, record)
    used = climbed["prompt_tokens"]
    row, wrong = judge_needle(
        stream_message(chunks), stream_finish(chunks), used, candidate.max_model_len, settings
    )
    record.evidence.append_jsonl("capacity_results.jsonl", {"check": "needle", **row})
    fill = claim("needle_prompt_fill", "capacity_results.jsonl", op="field", path="fill")
    claim("needle_fill_reached", "capacity_results.jsonl", op="field", path="fill_reached")
    assert used is not None, f"{NEEDLE_TAG}: the serve reported no prompt token count"
    assert fill_reaches(fill, plan.wanted_fill), (
        f"needle prompt filled only {fill:.0%} of the bound, {plan.wanted_fill:.0%} wanted"
    )
    assert row["ok"], f"needle at {used} tokens not retrieved: {wrong}"


def test_over_bound_rejected_and_server_survives(
    api: Api,
    candidate: Candidate,
    calibration: Calibration,
    record: CandidateRecord,
    claim: Claimer,
) -> None:
    settings = candidate.gate("capacity")
    known = engine_for(candidate.engine).over_length
    over = calibration.sentences_for(int(candidate.max_model_len * settings["over_by"]))
    # Refused before any prefill when the engine is right; one that truncates silently
    # prefills at most the bound, and must still answer in time to be judged silent.
    most = candidate.max_model_len
    reply = api.chat(
        "over-bound", _ask(candidate, filler(over) + " " + QUESTION), prompt_tokens=most
    )
    plain = classify(reply.status, reply.body, over_length=known)
    streamed = None
    if settings["stream_over_bound"]:
        stream = api.stream_chat(
            "over-bound-stream", _ask(candidate, filler(over)), prompt_tokens=most
        )
        streamed = classify(stream.status, stream.error_body, stream.chunks, known)
    after = api.chat("after-over-bound", _ask(candidate, "Say hello.", 8))
    problems = over_bound_problems(plain, streamed, after.status)
    record.evidence.append_jsonl(
        "capacity_results.jsonl",
        {
            "check": "over_bound",
            "status": reply.status,
            "error_body": reply.body,
            "plain": plain.as_dict(),
            "stream": streamed.as_dict() if streamed else None,
            "prompt_tokens_estimate": calibration.tokens_for(over),
            "after_status": after.status,
            "ok": not problems,
        },
    )
    claim("over_bound_status", "capacity_results.jsonl", op="field", path="status")
    if streamed is not None:  # how the stream was refused, in the finding and the report
        claim("over_bound_stream", "capacity_results.jsonl", op="field", path="stream.outcome")
        claim("over_bound_stream_said", "capacity_results.jsonl", op="field", path="stream.said")
    assert not problems, "; ".join(problems)


def test_kv_capacity_recorded(api: Api, candidate: Candidate, record: CandidateRecord) -> None:
    facts = {"max_model_len": candidate.max_model_len, "engine": candidate.engine}
    probe = engine_for(candidate.engine).kv_capacity
    if probe is None:
        facts["kv_tokens"] = candidate.max_model_len  # llama.cpp: one slot of n_ctx tokens
    else:
        facts[probe.fact] = None
        for path in probe.paths:  # a 404: the next (older) path
            got = api.request(f"kv-capacity{path}", "GET", path, timeout=10)
            if got.status != 404:
                facts[probe.fact] = probe.read(got.body) if got.status == 200 else None
                facts["source"] = path
                break
    record.evidence.write_json("kv_capacity.json", facts)
