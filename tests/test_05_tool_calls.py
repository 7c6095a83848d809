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
"""

from __future__ import annotations

import pytest

from tp2qual.checks.replies import reply_message
from tp2qual.checks.tool_modes import base_mode, judge_mode, judge_result_answer, twin_tag
from tp2qual.checks.toolcalls import reassemble_stream
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer, Exchange, chat_body, messages

pytestmark = pytest.mark.tool_calls

MODES = ["auto", "required", "named", "auto-stream", "required-stream", "named-stream"]


def _choice(mode: str, tool_name: str) -> object:
    base = base_mode(mode)
    return {"type": "function", "function": {"name": tool_name}} if base == "named" else base


def _messages(settings: dict) -> list[dict]:
    return messages(settings["prompt"], settings.get("system"))


def _body(candidate: Candidate, settings: dict, mode: str) -> dict:
    return chat_body(
        candidate,
        _messages(settings),
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


@pytest.mark.parametrize("mode", MODES)
def test_tool_call(
    mode: str, api: Api, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    settings = _require(candidate, mode)
    if mode.endswith("-stream"):
        stream = api.stream_chat(mode, _body(candidate, settings, mode))
        assert stream.status == 200, f"{mode}: HTTP {stream.status}: {stream.error_body}"
        got = reassemble_stream(stream.chunks)
    else:
        reply = api.chat(mode, _body(candidate, settings, mode))
        message = _answered(reply, mode)
        got = {"tool_calls": message.get("tool_calls"), "finish_reason": reply.finish_reason}

    def twin() -> tuple[int | None, object]:
        asked = api.chat(twin_tag(mode), _body(candidate, settings, base_mode(mode)))
        return asked.status, asked.body

    verdict, problems = judge_mode(mode, got, settings, candidate.engine, twin)
    record.evidence.append_jsonl(
        "tool_calls_verdicts.jsonl",
        {"mode": mode, "ok": not problems, "problems": problems, **verdict.measures},
    )
    claim("tool_calls_ok", "tool_calls_verdicts.jsonl", op="all", field="ok")
    claim("tool_calls_checked", "tool_calls_verdicts.jsonl", op="count")
    assert not problems, f"{mode}: " + "; ".join(problems)


def test_tool_result_is_used(api: Api, candidate: Candidate, record: CandidateRecord) -> None:
    settings = _require(candidate, "result")
    first_mode = next(m for m in settings["modes"] if not m.endswith("-stream"))
    reply = api.chat("result-call", _body(candidate, settings, first_mode))
    called = _answered(reply, "result-call")
    calls = called.get("tool_calls") or []
    assert calls, f"no tool call to answer: {called}"
    turns = [
        *_messages(settings),
        {"role": "assistant", "content": "", "tool_calls": calls[:1]},
        {
            "role": "tool",
            "tool_call_id": calls[0].get("id", "call_0"),
            "content": settings["result"],
        },
    ]
    answer = api.chat(
        "result-answer", chat_body(candidate, turns, max_tokens=settings["max_tokens"])
    )
    message = _answered(answer, "result-answer")
    allowed = settings["finish_reasons"]
    verdict = judge_result_answer(message, answer.finish_reason, settings["result_expect"], allowed)
    record.evidence.append_jsonl(
        "tool_calls_verdicts.jsonl",
        {
            "mode": "result",
            "ok": verdict.ok,
            "problems": [verdict.reason] if not verdict.ok else [],
            **verdict.measures,
        },
    )
    assert verdict.ok, verdict.reason
