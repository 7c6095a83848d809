"""Gate 06's over-bound rule on recorded and source-quoted bodies (data/over-bound/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tp2qual.checks.overlength import OverBound, classify, over_bound_problems, read_error
from tp2qual.engines import OBJECT_ERROR, OPENAI_ERROR, engine_for

DATA = Path(__file__).with_name("data")
SGLANG, VLLM, LLAMA = (engine_for(k).over_length for k in ("sglang", "vllm", "llama.cpp"))


def load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DATA / name).read_text())
    return loaded


def streamed(name: str, known: Any) -> Any:
    got = load(name)
    return classify(got["status"], got["error_body"], got["chunks"], known)


def test_sglang_rejection_inside_a_200_stream_is_a_rejection_said_as_such() -> None:
    answer = streamed("over-bound/sglang-0.5.23-stream-200.json", SGLANG)
    assert answer.outcome is OverBound.REJECTED_IN_STREAM and answer.ok, answer
    assert (answer.status, answer.code, answer.envelope) == (200, 400, OPENAI_ERROR.name)
    assert answer.names_length and answer.message.startswith("Input length (2561 tokens)")
    said = answer.said()
    assert said.startswith(
        "rejected inside an HTTP 200 stream (error chunk, code 400; SGLang's way"
    ), said
    assert "sgl-project/sglang#12081" in said
    assert "silent" not in said and answer.problem == ""
    assert answer.as_dict()["outcome"] == "rejected_in_stream"


def test_the_top_level_envelope_is_read_in_a_stream_too() -> None:
    answer = streamed("over-bound/sglang-top-level-stream-200.json", SGLANG)
    assert answer.outcome is OverBound.REJECTED_IN_STREAM, answer
    assert answer.envelope == OBJECT_ERROR.name and answer.names_length
    elsewhere = classify(200, None, load("over-bound/sglang-top-level-stream-200.json")["chunks"])
    assert elsewhere.ok and "not a way this engine is known to answer" in elsewhere.said()


@pytest.mark.parametrize(
    "name",
    ["over-bound/sglang-0.5.23-plain-400.json", "over-bound/llamacpp-0.3.36-plain-400.json"],
)
def test_plain_rejections_of_each_envelope(name: str) -> None:
    got = load(name)
    known = SGLANG if "sglang" in name else LLAMA
    answer = classify(got["status"], got["body"], over_length=known)
    assert answer.outcome is OverBound.REJECTED and answer.status == 400, answer
    assert answer.names_length, answer.message


def test_sglang_stream_rejected_before_it_starts_is_a_plain_400() -> None:
    answer = streamed("over-bound/sglang-0.5.23-stream-400.json", SGLANG)
    assert answer.outcome is OverBound.REJECTED and answer.envelope == OBJECT_ERROR.name


@pytest.mark.parametrize("name", ["over-bound.json", "over-bound-stream.json"])
def test_vllm_recorded_rejections(name: str) -> None:
    got = load(f"vllm-0.32.0/{name}")
    chunks = [] if "stream" in name else None
    answer = classify(got["status"], got["response"], chunks, VLLM)
    assert answer.outcome is OverBound.REJECTED and answer.names_length, answer


def test_an_answer_with_no_error_is_a_silent_truncation() -> None:
    plain = classify(200, {"choices": [{"message": {"content": "Lisbon."}}]})
    assert plain.outcome is OverBound.ACCEPTED and not plain.ok
    assert plain.problem == "accepted (HTTP 200): silently truncated or over-served"
    text = [
        {"choices": [{"delta": {"content": "Lis"}}]},
        {"choices": [{"delta": {"content": "bon"}}]},
    ]
    stream = classify(200, None, text, SGLANG)
    assert stream.outcome is OverBound.ACCEPTED
    assert stream.problem.startswith("accepted (HTTP 200, 2 answer chunks, no error in the stream)")
    empty = classify(200, None, [], LLAMA)  # llama-cpp-python 0.3.36's own streamed answer
    assert empty.outcome is OverBound.ACCEPTED and "0 answer chunks" in empty.problem


def test_answer_served_before_the_error_is_not_a_rejection() -> None:
    error = load("over-bound/sglang-0.5.23-stream-200.json")["chunks"][0]
    chunks = [{"choices": [{"delta": {"content": "Lisbon"}}]}, error]
    answer = classify(200, None, chunks, SGLANG)
    assert answer.outcome is OverBound.ACCEPTED and "1 answer chunks served" in answer.problem


def test_server_errors_fail_plain_or_in_the_stream() -> None:
    plain = classify(500, {"error": {"message": "internal error", "type": "server_error"}})
    assert plain.outcome is OverBound.SERVER_ERROR
    assert plain.problem.startswith("HTTP 500: a server error")
    chunk = {"error": {"object": "error", "message": "CUDA out of memory", "code": 500}}
    stream = classify(200, None, [chunk], SGLANG)
    assert stream.outcome is OverBound.SERVER_ERROR and "code 500" in stream.problem


def test_malformed_answers_fail() -> None:
    assert classify(400, "not json").problem == "HTTP 400 without a JSON error body"
    assert classify(400, {"choices": []}).outcome is OverBound.MALFORMED
    detail = classify(422, {"detail": "too long"})  # another JSON error body: still a rejection
    assert detail.outcome is OverBound.REJECTED and detail.message == "too long"
    assert classify(302, None).outcome is OverBound.MALFORMED
    uncoded = classify(200, None, [{"error": {"message": "too long"}}])
    assert uncoded.outcome is OverBound.MALFORMED and "no 4xx code" in uncoded.problem
    assert classify(None, None).outcome is OverBound.SERVER_ERROR  # no answer at all


def test_read_error_reads_both_envelopes_and_nothing_else() -> None:
    nested = {"error": {"message": "m", "code": 400}}
    top = {"object": "error", "message": "m", "code": 400}
    assert read_error(nested) == ({"message": "m", "code": 400}, OPENAI_ERROR.name)
    assert read_error(top) == (top, OBJECT_ERROR.name)
    assert read_error({"object": "chat.completion.chunk", "message": "m"}) is None
    assert read_error({"error": "a string"}) is None and read_error([1]) is None


def test_over_bound_problems_name_each_failure() -> None:
    ok = streamed("over-bound/sglang-0.5.23-stream-200.json", SGLANG)
    rejected = classify(400, {"object": "error", "message": "too long", "code": 400})
    assert over_bound_problems(rejected, ok, 200) == []
    silent = classify(200, None, [], SGLANG)
    problems = over_bound_problems(rejected, silent, 503)
    assert problems[0].startswith("streamed: accepted (HTTP 200")
    assert problems[1] == "server unhealthy afterwards: HTTP 503"
