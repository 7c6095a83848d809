"""The gates' engine rules against real vLLM 0.32.0 answers, recorded from the embedded vLLM
serve (plugins/tests/data/vllm-0.32.0/, README there: command lines and request bodies).

A named tool_choice ends with finish_reason "stop" on vLLM (as OpenAI does) and the gate's rule
says so; a required one ends "tool_calls"; a streamed reply whose budget ended inside reasoning
(content empty, everything in ``delta.reasoning``) is a budget problem, never a wrong answer;
``/v1/models`` and ``/version`` carry what the model-list gate checks; the ``/metrics``
histograms the throughput gate reads are there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import recorded

from tp2qual.checks.answers import check_answer, check_budget, split_reasoning
from tp2qual.checks.toolcalls import check_call, expected_finish
from tp2qual.perf.metrics import histogram_totals, parse

DATA = Path(__file__).parent / "data" / "vllm-0.32.0"
TOOL = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


def _load(name: str) -> dict[str, Any]:
    return recorded.load(DATA / name)


def _call(name: str) -> tuple[list[dict[str, Any]], str | None]:
    return recorded.tool_call(DATA / name)


@pytest.mark.parametrize(
    ("name", "mode", "finish"),
    [
        ("tool-named.json", "named", "stop"),
        ("tool-named-stream.json", "named-stream", "stop"),
        ("tool-required.json", "required", "tool_calls"),
        ("tool-required-stream.json", "required-stream", "tool_calls"),
    ],
)
def test_tool_calls_pass_under_the_engine_rule(name: str, mode: str, finish: str) -> None:
    calls, got = _call(name)
    assert got == finish  # what vLLM really said
    allowed, rule = expected_finish("vllm", mode)
    verdict = check_call(calls, got, "get_weather", TOOL, allowed, rule)
    assert verdict.ok, verdict.reason
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}


def test_named_stop_fails_under_a_tool_calls_only_rule() -> None:
    """The rule matters: without the vLLM rule a correct named call would FAIL the gate."""
    calls, got = _call("tool-named.json")
    allowed, rule = expected_finish("sglang", "named")
    verdict = check_call(calls, got, "get_weather", TOOL, allowed, rule)
    assert not verdict.ok and "finish_reason 'stop'" in verdict.reason


def _streamed_message(chunks: list[dict[str, Any]]) -> tuple[dict[str, Any], str | None]:
    content, reasoning, finish = [], [], None
    for chunk in chunks:
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning") or "")
            finish = choice.get("finish_reason") or finish
    return {"content": "".join(content), "reasoning": "".join(reasoning)}, finish


def test_budget_ending_inside_reasoning_is_a_budget_problem() -> None:
    recorded = _load("reasoning-budget-stream.json")
    message, finish = _streamed_message(recorded["chunks"])
    answer, reasoning = split_reasoning(message)
    assert (answer, finish) == ("", "length") and reasoning  # all of it went to reasoning
    budget = check_budget(answer, reasoning, finish, recorded["request"]["max_tokens"])
    assert not budget.ok and "ended inside reasoning" in budget.reason
    assert "not a wrong answer" in budget.reason
    wrong = check_answer(answer, ["Paris"])  # what the gate would have said without the rule
    assert not wrong.ok


def test_model_card_and_version() -> None:
    card = _load("v1-models.json")["data"][0]
    assert card["max_model_len"] == 2048 and card["owned_by"] == "vllm"
    assert _load("version.json") == {"version": "0.32.0"}


def test_metrics_carry_the_histograms_the_throughput_gate_reads() -> None:
    samples = parse((DATA / "metrics-histograms.txt").read_text())
    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:e2e_request_latency_seconds",
    ):
        totals = histogram_totals(samples, name)
        assert totals is not None and totals[1] > 0 and totals[0] > 0, name
