"""Tool-call checks over OpenAI-shaped dicts, including streamed chunk reassembly."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tp2qual.checks.replies import reply_message
from tp2qual.checks.toolcalls import (
    check_call,
    check_stream_matches,
    check_twin,
    check_uses_result,
    reassemble_stream,
)

WEATHER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "City name, e.g. Dallas"},
        "state": {"type": "string", "minLength": 2, "maxLength": 2},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
}

NESTED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "filters": {
            "type": "object",
            "properties": {"year": {"type": "integer"}, "tags": {"type": "array"}},
        },
        "items": {
            "type": "array",
            "items": {"type": "object", "properties": {"sku": {"type": "string"}}},
        },
    },
    "required": ["query"],
}


def _call(name: str = "get_current_weather", arguments: Any = None, **extra: Any) -> dict:
    if arguments is None:
        arguments = json.dumps({"city": "Dallas", "state": "TX", "unit": "fahrenheit"})
    return {
        "id": "chatcmpl-tool-3f1c0a9e2b7d4c58",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
        **extra,
    }


def _chunk(delta: dict, finish_reason: str | None = None) -> dict:
    return {
        "id": "chatcmpl-7d2e",
        "object": "chat.completion.chunk",
        "created": 1735689600,
        "model": "served-model",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
    }


def _tool_delta(index: int, arguments: str, **head: str) -> dict:
    delta: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if "name" in head:
        delta.update(id=head["id"], type="function")
        delta["function"]["name"] = head["name"]
    return delta


# One call: role+id+name first, arguments in fragments, finish_reason last, then usage.
STREAM_ONE = [
    _chunk(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_tool_delta(0, "", id="chatcmpl-tool-3f1c", name="get_current_weather")],
        }
    ),
    _chunk({"tool_calls": [_tool_delta(0, '{"city": "Dal')]}),
    _chunk({"tool_calls": [_tool_delta(0, 'las", "state"')]}),
    _chunk({"tool_calls": [_tool_delta(0, ': "TX", "unit": "fahrenheit"}')]}),
    _chunk({}, finish_reason="tool_calls"),
    {"id": "chatcmpl-7d2e", "object": "chat.completion.chunk", "choices": [], "usage": {}},
]

# Two parallel calls, the second interleaved with the first's tail, after some content.
STREAM_TWO = [
    _chunk({"role": "assistant", "content": ""}),
    _chunk({"content": "Let me check "}),
    _chunk({"content": "both cities."}),
    _chunk({"tool_calls": [_tool_delta(0, '{"city": ', id="call_a", name="get_current_weather")]}),
    _chunk({"tool_calls": [_tool_delta(0, '"Paris", "unit": "celsius"}')]}),
    _chunk({"tool_calls": [_tool_delta(1, "", id="call_b", name="get_current_weather")]}),
    _chunk({"tool_calls": [_tool_delta(1, '{"unit": "celsius",')]}),
    _chunk({"tool_calls": [_tool_delta(1, ' "city": "Oslo"}')]}),
    _chunk({}, finish_reason="tool_calls"),
]

NON_STREAMED_TWO = [
    _call(arguments='{"city":"Paris","unit":"celsius"}'),
    _call(arguments='{"city":"Oslo","unit":"celsius"}'),
]


def test_valid_call_passes_with_parsed_arguments() -> None:
    verdict = check_call([_call()], "tool_calls", "get_current_weather", WEATHER_SCHEMA)
    assert verdict.ok, verdict.reason
    assert verdict.measures["name"] == "get_current_weather"
    assert verdict.measures["arguments"] == {"city": "Dallas", "state": "TX", "unit": "fahrenheit"}


@pytest.mark.parametrize(
    ("calls", "finish", "fragment"),
    [
        (None, "stop", "exactly one tool call, got 0"),
        ([], "tool_calls", "exactly one tool call, got 0"),
        ([_call(), _call()], "tool_calls", "exactly one tool call, got 2"),
        ([_call(name="get_forecast")], "tool_calls", "called 'get_forecast'"),
        ([_call(arguments='{"city": "Dallas", ')], "tool_calls", "not valid JSON"),
        ([_call(arguments='["Dallas"]')], "tool_calls", "must be a JSON object, got list"),
        ([_call(arguments={"city": "Dallas"})], "tool_calls", "must be a JSON string, got dict"),
        ([_call(arguments='{"city": "Dallas"}')], "tool_calls", "'unit' is a required property"),
        (
            [_call(arguments='{"city": "Dallas", "unit": "kelvin"}')],
            "tool_calls",
            "at $.unit: 'kelvin' is not one of",
        ),
        (
            [_call(arguments='{"city": "Dallas", "state": "Texas", "unit": "celsius"}')],
            "tool_calls",
            "at $.state:",
        ),
        (
            [_call(arguments='{"city": "Dallas", "unit": "celsius", "country": "US"}')],
            "tool_calls",
            "undeclared parameters ['$.country']",
        ),
        ([_call()], "stop", "finish_reason 'stop', expected 'tool_calls'"),
        ([{**_call(), "id": ""}], "tool_calls", "id missing or empty"),
        ([{**_call(), "type": "code"}], "tool_calls", "type is 'code'"),
        ([{"name": "get_current_weather"}], "tool_calls", "'function' object"),
    ],
    ids=[
        "none",
        "empty",
        "two",
        "wrong-name",
        "bad-json",
        "array",
        "not-string",
        "missing-required",
        "enum",
        "max-length",
        "extra",
        "finish-stop",
        "empty-id",
        "wrong-type",
        "flat-shape",
    ],
)
def test_bad_calls_fail_with_reason(calls: Any, finish: str, fragment: str) -> None:
    verdict = check_call(calls, finish, "get_current_weather", WEATHER_SCHEMA)
    assert not verdict.ok
    assert fragment in verdict.reason


def test_nested_extras_are_found_along_their_path() -> None:
    args = {
        "query": "q",
        "filters": {"year": 2024, "colour": "red"},
        "items": [{"sku": "a", "n": 2}],
    }
    verdict = check_call([_call("search", json.dumps(args))], "tool_calls", "search", NESTED_SCHEMA)
    assert not verdict.ok
    assert "['$.filters.colour', '$.items[0].n']" in verdict.reason


def test_explicit_additional_properties_is_honoured() -> None:
    schema = copy.deepcopy(NESTED_SCHEMA)
    schema["additionalProperties"] = True
    args = json.dumps({"query": "q", "debug": True})
    assert check_call([_call("search", args)], "tool_calls", "search", schema).ok
    schema["additionalProperties"] = False
    verdict = check_call([_call("search", args)], "tool_calls", "search", schema)
    assert "additional properties" in verdict.reason.lower()  # jsonschema's own wording


def test_expected_finish_reason_can_be_changed() -> None:
    assert check_call([_call()], "stop", "get_current_weather", WEATHER_SCHEMA, "stop").ok


def test_reassemble_single_call_stream() -> None:
    message = reassemble_stream(STREAM_ONE)
    assert message["finish_reason"] == "tool_calls"
    assert message["content"] == ""
    assert message["name_deltas"] == [1]
    assert message["id_deltas"] == [1]
    [call] = message["tool_calls"]
    assert call["id"] == "chatcmpl-tool-3f1c"
    assert call["function"]["name"] == "get_current_weather"
    assert json.loads(call["function"]["arguments"]) == {
        "city": "Dallas",
        "state": "TX",
        "unit": "fahrenheit",
    }
    verdict = check_call(
        message["tool_calls"], message["finish_reason"], "get_current_weather", WEATHER_SCHEMA
    )
    assert verdict.ok, verdict.reason


def test_reassemble_parallel_calls_and_content() -> None:
    message = reassemble_stream(STREAM_TWO)
    assert message["content"] == "Let me check both cities."
    assert [c["id"] for c in message["tool_calls"]] == ["call_a", "call_b"]
    assert (
        message["tool_calls"][1]["function"]["arguments"] == '{"unit": "celsius", "city": "Oslo"}'
    )
    assert message["name_deltas"] == [1, 1]


def test_reassemble_collects_reasoning_and_ignores_other_choices() -> None:
    stray = _chunk({"content": "other choice"})
    stray["choices"][0]["index"] = 1
    chunks = [_chunk({"reasoning_content": "User wants "}), _chunk({"reasoning": "weather."})]
    message = reassemble_stream([*chunks, stray, _chunk({"content": "Hi"}, "stop")])
    assert message == {
        "tool_calls": [],
        "finish_reason": "stop",
        "content": "Hi",
        "reasoning_content": "User wants weather.",
        "name_deltas": [],
        "id_deltas": [],
    }


def test_stream_matches_non_streamed_despite_key_order() -> None:
    verdict = check_stream_matches(reassemble_stream(STREAM_TWO), NON_STREAMED_TWO)
    assert verdict.ok, verdict.reason
    assert verdict.measures["name_deltas"] == [1, 1]


def test_name_streamed_twice_fails_even_if_arguments_match() -> None:
    chunks = copy.deepcopy(STREAM_ONE)
    chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] = ""
    assert check_stream_matches(reassemble_stream(chunks), [_call()]).ok  # empty name ignored
    chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] = "get_current_weather"
    message = reassemble_stream(chunks)
    assert message["name_deltas"] == [2]
    verdict = check_stream_matches(message, [_call(name="get_current_weather" * 2)])
    assert not verdict.ok
    assert "not streamed exactly once for calls [0]" in verdict.reason


@pytest.mark.parametrize(
    ("non_streamed", "fragment"),
    [
        (NON_STREAMED_TWO[:1], "streamed 2 tool calls, non-streamed 1"),
        (
            [NON_STREAMED_TWO[0], _call(arguments='{"city":"Bergen","unit":"celsius"}')],
            "call 1: arguments differ",
        ),
        ([NON_STREAMED_TWO[0], _call(name="get_time")], "call 1: streamed name"),
        ([NON_STREAMED_TWO[0], _call(arguments="{")], "call 1: non-streamed arguments are not"),
    ],
    ids=["count", "arguments", "name", "unparsable"],
)
def test_stream_mismatch_fails(non_streamed: list[dict], fragment: str) -> None:
    verdict = check_stream_matches(reassemble_stream(STREAM_TWO), non_streamed)
    assert not verdict.ok
    assert fragment in verdict.reason


@pytest.mark.parametrize(
    ("answer", "fragments", "ok"),
    [
        ("It is currently 72 °F and   Sunny in Dallas.", ["sunny"], True),
        ("The forecast says\nPARTLY   cloudy skies.", ["partly cloudy"], True),
        ("It is 21 degrees.", ["72", "sunny"], False),
        ("", ["sunny"], False),
    ],
)
def test_check_uses_result(answer: str, fragments: list[str], ok: bool) -> None:
    verdict = check_uses_result(answer, fragments)
    assert verdict.ok is ok
    if not ok:
        assert "uses none of" in verdict.reason


def test_check_uses_result_needs_fragments() -> None:
    with pytest.raises(ValueError, match="at least one"):
        check_uses_result("anything", [])


def test_schema_reason_counts_further_errors() -> None:
    args = '{"city": 3, "unit": "kelvin"}'
    verdict = check_call(
        [_call(arguments=args)], "tool_calls", "get_current_weather", WEATHER_SCHEMA
    )
    assert not verdict.ok
    assert verdict.reason.endswith("(+1 more)")
    assert verdict.measures["arguments"] == {"city": 3, "unit": "kelvin"}


# --- a non-streamed reply is read only when it is one (gate 05's every request) -----------------

SERVER_ERROR = {"error": {"message": "internal error", "type": "server_error"}}


@pytest.mark.parametrize(
    ("status", "body", "problem"),
    [
        (500, SERVER_ERROR, 'HTTP 500: {"error": {"message": "internal error"'),
        (503, "upstream unavailable", "HTTP 503: upstream unavailable"),
        (200, {"object": "error", "message": "boom"}, "HTTP 200 without a chat completion message"),
        (200, {"choices": []}, 'HTTP 200 without a chat completion message: {"choices": []}'),
        (200, {"choices": [{"message": None}]}, "HTTP 200 without a chat completion message"),
    ],
    ids=["500-json", "503-text", "200-error-envelope", "200-no-choice", "200-null-message"],
)
def test_a_reply_without_a_message_says_why(status: int, body: Any, problem: str) -> None:
    message, why = reply_message(status, body)
    assert message is None and why.startswith(problem), why


def test_a_long_body_is_cut_in_the_reason() -> None:
    _, why = reply_message(500, "x" * 1000)
    assert why == "HTTP 500: " + "x" * 300 + "…"


def test_twin_is_judged_on_its_raw_answer() -> None:
    streamed = reassemble_stream(STREAM_TWO)
    answered = {"choices": [{"message": {"role": "assistant", "tool_calls": NON_STREAMED_TWO}}]}
    assert reply_message(200, answered) == (answered["choices"][0]["message"], "")
    assert check_twin(streamed, 200, answered).ok
    failed = check_twin(streamed, 500, SERVER_ERROR)
    assert not failed.ok and failed.measures == {"twin_status": 500}
    assert failed.reason.startswith("non-streamed twin: HTTP 500: {")
    assert "internal error" in failed.reason  # the body the candidate sent
