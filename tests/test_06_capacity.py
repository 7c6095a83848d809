"""Gate 06 — context capacity.

Pass means: a needle placed in a prompt filling about 90 % of the bounded context is retrieved;
a prompt over the bound is rejected cleanly — an HTTP 4xx with a JSON error body, not a 5xx and
not a silent truncation — and the server still answers afterwards. The KV capacity is recorded
where the engine exposes it. Prompt lengths are calibrated on the server's own token counts.
"""

from __future__ import annotations

import re

import pytest

from tp2qual.checks.answers import check_answer, check_budget, split_reasoning
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer, Server, chat_body
from tp2qual.prompts import Calibration, calibrate, filler

pytestmark = pytest.mark.capacity

NEEDLE = "Remember this: the secret city is {answer}."
QUESTION = "What is the secret city? Answer with the city name only."


def _ask(candidate: Candidate, content: str, max_tokens: int = 16) -> dict:
    return chat_body(candidate, content, max_tokens=max_tokens)


@pytest.fixture(scope="module")
def calibration(server: Server, candidate: Candidate) -> Calibration:
    api = server.api("capacity.jsonl", "capacity")
    seen = []
    for sentences in (8, 24):
        reply = api.chat(f"calibrate-{sentences}", _ask(candidate, filler(sentences), 1))
        assert reply.status == 200, f"calibration: HTTP {reply.status}: {reply.body}"
        seen.append((sentences, reply.body["usage"]["prompt_tokens"]))
    return calibrate(*seen)


def test_needle_found_near_the_bound(
    api: Api,
    candidate: Candidate,
    calibration: Calibration,
    record: CandidateRecord,
    claim: Claimer,
) -> None:
    settings = candidate.gate("capacity")
    answer = settings.get("needle_answer", "Lisbon")
    budget = settings["needle_max_tokens"]  # a thinking model reasons before it answers
    target = int(candidate.max_model_len * settings["fill"]) - budget  # room for the reply
    total = calibration.sentences_for(target)
    half = total // 2
    prompt = " ".join(
        [filler(half), NEEDLE.format(answer=answer), filler(total - half, start=half + 1), QUESTION]
    )
    reply = api.chat("needle", _ask(candidate, prompt, budget))
    assert reply.status == 200, f"needle prompt: HTTP {reply.status}: {reply.body}"
    used = reply.body["usage"]["prompt_tokens"]
    text, reasoning = split_reasoning(reply.message)
    verdict = check_budget(text, reasoning, reply.finish_reason, budget)
    verdict = check_answer(text, [answer]) if verdict.ok else verdict
    record.evidence.append_jsonl(
        "capacity_results.jsonl",
        {
            "check": "needle",
            "prompt_tokens": used,
            "fill": used / candidate.max_model_len,
            "answer": text,
            "expect": answer,
            "ok": verdict.ok,
        },
    )
    fill = claim("needle_prompt_fill", "capacity_results.jsonl", op="field", path="fill")
    assert fill >= settings["fill"] - 0.05, f"needle prompt filled only {fill:.0%} of the bound"
    assert verdict.ok, f"needle at {used} tokens not retrieved: {verdict.reason}"


def _clean_rejection(status: int, body: object) -> str:
    if status == 200:
        return "accepted (HTTP 200): silently truncated or over-served"
    if status >= 500:
        return f"HTTP {status}: a server error, not a clean rejection"
    if not 400 <= status < 500:
        return f"HTTP {status}"
    if not isinstance(body, dict) or not {"error", "detail", "message"} & body.keys():
        return f"HTTP {status} without a JSON error body"
    return ""


def test_over_bound_rejected_and_server_survives(
    api: Api,
    candidate: Candidate,
    calibration: Calibration,
    record: CandidateRecord,
    claim: Claimer,
) -> None:
    settings = candidate.gate("capacity")
    over = calibration.sentences_for(int(candidate.max_model_len * settings["over_by"]))
    reply = api.chat("over-bound", _ask(candidate, filler(over) + " " + QUESTION))
    problems = [p for p in [_clean_rejection(reply.status, reply.body)] if p]
    if settings["stream_over_bound"]:
        stream = api.stream_chat("over-bound-stream", _ask(candidate, filler(over)))
        problem = _clean_rejection(stream.status, stream.error_body)
        problems += [f"streamed: {problem}"] if problem else []
    after = api.chat("after-over-bound", _ask(candidate, "Say hello.", 8))
    problems += [] if after.status == 200 else [f"server unhealthy afterwards: HTTP {after.status}"]
    record.evidence.append_jsonl(
        "capacity_results.jsonl",
        {
            "check": "over_bound",
            "status": reply.status,
            "error_body": reply.body,
            "prompt_tokens_estimate": calibration.tokens_for(over),
            "after_status": after.status,
            "ok": not problems,
        },
    )
    claim("over_bound_status", "capacity_results.jsonl", op="field", path="status")
    assert not problems, "; ".join(problems)


def test_kv_capacity_recorded(api: Api, candidate: Candidate, record: CandidateRecord) -> None:
    facts = {"max_model_len": candidate.max_model_len, "engine": candidate.engine}
    if candidate.engine == "vllm":
        metrics = api.request("metrics", "GET", "/metrics", timeout=10)
        found = re.search(r'vllm:cache_config_info\{[^}]*num_gpu_blocks="(\d+)"', str(metrics.body))
        facts["num_gpu_blocks"] = int(found.group(1)) if found else None
    elif candidate.engine == "sglang":
        info = api.request("server-info", "GET", "/server_info", timeout=10)
        if info.status == 404:  # SGLang before /server_info: the deprecated alias
            info = api.request("server-info-old", "GET", "/get_server_info", timeout=10)
        body = info.body if isinstance(info.body, dict) else {}
        facts["max_total_num_tokens"] = body.get("max_total_num_tokens")
    else:
        facts["kv_tokens"] = candidate.max_model_len  # llama.cpp: one slot of n_ctx tokens
    record.evidence.write_json("kv_capacity.json", facts)
