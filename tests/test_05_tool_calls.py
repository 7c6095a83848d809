"""Gate 05 — structured tool calls.

Pass means, for every tool_choice mode the candidate requires (``auto``, ``required``, a
``named`` tool; each streamed or not): exactly the expected call, arguments that parse as JSON
and validate against the tool's JSON Schema with no undeclared parameters, the expected argument
values, the finish reason the engine gives a correct call (``tool_calls``; vLLM ends a
*named* call with ``stop``, deliberately, as OpenAI does — the verdict records which rule
applied); a streamed call reassembles to the non-streamed one
with its name sent once; and a follow-up turn carrying the tool result gets a visible answer,
ended as ``finish_reasons`` allows (default ``stop``), that uses it (mode ``result``). Modes the
candidate does not require are skipped with its written reason.
Every request — each mode's, the twin, the result turn's two — must be answered: an HTTP error
or a reply with no message fails the candidate with the status and the body, never a suite
error from reading a message that is not there.

Power (``checks.tool_power``): each required mode is asked ``repeats`` times (N), the same request
each time (system message, tools and question: one shared prefix, which a prefix cache serves
after the first), each call its own verdict row and raw exchange (``call_tag``). Identical
requests at temperature 0 test the serving stack call after call (a parser or grammar whose
state fails one call in k, a cache that answers a repeat differently), not the model over other
questions: the rate excluded is per call of this request. A varied question was tried and
dropped: "(request k of N)" at its end turned 10 of 14 of SmolLM2's ``auto`` calls into text.
A mode fails when any call fails, naming the first and the count;
when all N pass it states the failure rate it excludes (one-sided 95 %, 1 - 0.05 ** (1/N), about
3/N), or "not judged: no power" among the gate's skipped checks where that rate is above the
candidate's ``max_failure_rate``. With ``long_fill`` > 0 one more call (mode ``long``: the first
of required, named, auto the candidate requires) follows a prompt filling at least that share of
``max_model_len``, its fill measured from the reply's ``usage.prompt_tokens``.
"""

from __future__ import annotations

import pytest

from tp2qual.checks.replies import reply_message
from tp2qual.checks.tool_modes import (
    base_mode,
    call_tag,
    judge_long,
    judge_mode,
    judge_result_answer,
    long_aim,
    long_base,
    twin_tag,
)
from tp2qual.checks.tool_power import judge_repeats
from tp2qual.checks.toolcalls import reassemble_stream
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer, Exchange, chat_body, messages
from tp2qual.prompts import calibrate, filler

pytestmark = pytest.mark.tool_calls

MODES = ["auto", "required", "named", "auto-stream", "required-stream", "named-stream"]


def _choice(mode: str, tool_name: str) -> object:
    base = base_mode(mode)
    return {"type": "function", "function": {"name": tool_name}} if base == "named" else base


def _messages(settings: dict, prompt: str | None = None) -> list[dict]:
    return messages(settings["prompt"] if prompt is None else prompt, settings.get("system"))


def _body(candidate: Candidate, settings: dict, mode: str, prompt: str | None = None) -> dict:
    return chat_body(
        candidate,
        _messages(settings, prompt),
        max_tokens=settings["max_tokens"],
        tools=[{"type": "function", "function": settings["tool"]}],
        tool_choice=_choice(mode, settings["tool"]["name"]),
    )


def _answered(reply: Exchange, what: str) -> dict:
    """The reply's message; an HTTP error or a reply without one fails the candidate, with
    the status and the body in the reason."""
    message, problem = reply_message(reply.status, reply.body)
    assert message is not None, f"{what}: {problem}"
    return message


def _require(candidate: Candidate, mode: str) -> dict:
    settings = candidate.gate("tool_calls")
    if mode not in settings["modes"]:
        pytest.skip(f"mode {mode} not required for {candidate.name}: {settings.get('why', '')}")
    return settings


def _power(
    record: CandidateRecord, claim: Claimer, mode: str, problems: list[list[str]], settings: dict
) -> None:
    """The mode's N calls judged together: failed on any failed call, else the rate excluded,
    or "not judged: no power" among the gate's skipped checks."""
    verdict = judge_repeats(mode, problems, float(settings["max_failure_rate"]))
    record.evidence.append_jsonl("tool_calls_power.jsonl", {"ok": verdict.ok, **verdict.measures})
    claim("tool_calls_power_ok", "tool_calls_power.jsonl", op="all", field="ok")
    if verdict.ok and not verdict.measures["judged"]:
        record.gates["tool_calls"].skipped[f"{mode} failure rate"] = verdict.measures["statement"]
        record.save()
    assert verdict.ok, verdict.reason


def _call(
    api: Api, candidate: Candidate, settings: dict, mode: str, repeat: int
) -> tuple[dict, list[str]]:
    """One call of a mode (its ``repeat``-th): its verdict's figures and its problems."""
    tag = call_tag(mode, repeat)
    if mode.endswith("-stream"):
        stream = api.stream_chat(tag, _body(candidate, settings, mode))
        assert stream.status == 200, f"{tag}: HTTP {stream.status}: {stream.error_body}"
        got = reassemble_stream(stream.chunks)
    else:
        reply = api.chat(tag, _body(candidate, settings, mode))
        message = _answered(reply, tag)
        got = {"tool_calls": message.get("tool_calls"), "finish_reason": reply.finish_reason}

    def twin() -> tuple[int | None, object]:
        asked = api.chat(twin_tag(tag), _body(candidate, settings, base_mode(mode)))
        return asked.status, asked.body

    verdict, problems = judge_mode(mode, got, settings, candidate.engine, twin)
    return {"mode": mode, "repeat": repeat, "tag": tag, **verdict.measures}, problems


@pytest.mark.parametrize("mode", MODES)
def test_tool_call(
    mode: str, api: Api, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    settings = _require(candidate, mode)
    seen = []
    for repeat in range(1, int(settings["repeats"]) + 1):
        row, problems = _call(api, candidate, settings, mode, repeat)
        record.evidence.append_jsonl(
            "tool_calls_verdicts.jsonl", {**row, "ok": not problems, "problems": problems}
        )
        seen.append(problems)
    claim("tool_calls_ok", "tool_calls_verdicts.jsonl", op="all", field="ok")
    claim("tool_calls_checked", "tool_calls_verdicts.jsonl", op="count")
    _power(record, claim, mode, seen, settings)


def _result_once(api: Api, candidate: Candidate, settings: dict, repeat: int) -> dict:
    """One call answered with the tool's result, and the answer judged: its verdict row."""
    first_mode = next(m for m in settings["modes"] if not m.endswith("-stream"))
    call = call_tag("result-call", repeat)
    reply = api.chat(call, _body(candidate, settings, first_mode))
    called = _answered(reply, call)
    calls = called.get("tool_calls") or []
    assert calls, f"{call}: no tool call to answer: {called}"
    turns = [
        *_messages(settings),
        {"role": "assistant", "content": "", "tool_calls": calls[:1]},
        {
            "role": "tool",
            "tool_call_id": calls[0].get("id", "call_0"),
            "content": settings["result"],
        },
    ]
    tag = call_tag("result-answer", repeat)
    answer = api.chat(tag, chat_body(candidate, turns, max_tokens=settings["max_tokens"]))
    message = _answered(answer, tag)
    allowed = settings["finish_reasons"]
    verdict = judge_result_answer(message, answer.finish_reason, settings["result_expect"], allowed)
    problems = [] if verdict.ok else [verdict.reason]
    return {"mode": "result", "repeat": repeat, "tag": tag, "ok": verdict.ok,
            "problems": problems, **verdict.measures}  # fmt: skip


def test_tool_result_is_used(
    api: Api, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    settings = _require(candidate, "result")
    seen = []
    for repeat in range(1, int(settings["repeats"]) + 1):
        row = _result_once(api, candidate, settings, repeat)
        record.evidence.append_jsonl("tool_calls_verdicts.jsonl", row)
        seen.append(row["problems"])
    _power(record, claim, "result", seen, settings)


def test_tool_call_after_a_long_prompt(
    api: Api, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    settings = candidate.gate("tool_calls")
    fill, base = float(settings["long_fill"]), long_base(settings["modes"])
    if not fill > 0 or base is None:
        why = "long_fill is 0" if base else "no non-streamed call mode required"
        pytest.skip(f"no tool call after a long prompt for {candidate.name}: {why}")
    seen = []
    for sentences in (8, 24):  # the server's own token count, as gate 06 calibrates
        reply = api.chat(
            f"long-calibrate-{sentences}", chat_body(candidate, filler(sentences), max_tokens=1)
        )
        assert reply.status == 200, f"calibration: HTTP {reply.status}: {reply.body}"
        seen.append((sentences, reply.usage("prompt_tokens")))
    length, budget = candidate.max_model_len, int(settings["max_tokens"])
    aim = long_aim(length, fill, budget)[1]
    text = f"{filler(calibrate(*seen).sentences_for(aim))}\n\n{settings['prompt']}"
    reply = api.chat("long", _body(candidate, settings, base, text), prompt_tokens=length - budget)
    message = _answered(reply, "long")
    got = {"tool_calls": message.get("tool_calls"), "finish_reason": reply.finish_reason}
    used = reply.usage("prompt_tokens")
    verdict, problems, row = judge_long(got, settings, candidate.engine, used, length)
    record.evidence.append_jsonl(
        "tool_calls_verdicts.jsonl",
        {"mode": "long", "tag": "long", **row, "ok": not problems, "problems": problems,
         **verdict.measures},
    )  # fmt: skip
    claim("tool_calls_ok", "tool_calls_verdicts.jsonl", op="all", field="ok")
    assert not problems, "long: " + "; ".join(problems)
