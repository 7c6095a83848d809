"""The reasoning control proven on every answer (checks/control.py), its proof re-derived by
verify from the raw exchanges (evidence/rederive/control.py), and the controls the campaign
candidates state: those the user qualified with on 2026-08-01 (issue 39)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tp2qual.candidate import load_candidates
from tp2qual.checks.control import (
    NOT_OFF,
    NOT_ON,
    control_rows,
    judge_control,
    reasoning_seen,
    stream_message,
)
from tp2qual.dry_run import control_lines
from tp2qual.evidence.rederive.common import GateRun, Rederived
from tp2qual.evidence.rederive.control import control

CANDIDATES = Path(__file__).resolve().parents[2] / "candidates"


def test_thinking_off_and_a_plain_answer_passes() -> None:
    verdict = judge_control("off", {"content": "Paris", "reasoning_content": None})
    assert verdict.ok
    assert verdict.measures["seen"] is False
    assert verdict.measures["answer_chars"] == 5


@pytest.mark.parametrize(
    ("message", "field", "chars"),
    [
        ({"content": "Paris", "reasoning_content": "France's capital."}, "reasoning_content", 17),
        ({"content": "Paris", "reasoning": "France's capital."}, "reasoning", 17),
        ({"content": "<think>France's capital.</think>Paris"}, None, 17),
        ({"content": "France's capital.</think>Paris"}, None, 17),  # template opened it
        ({"content": "Paris<think>and then"}, None, 8),  # cut inside reasoning
        ({"content": "<think></think>Paris"}, None, 0),  # an empty block is still the switch on
    ],
)
def test_thinking_off_fails_on_any_reasoning(message: dict, field: str | None, chars: int) -> None:
    verdict = judge_control("off", message)
    assert not verdict.ok
    assert verdict.measures["control_class"] == NOT_OFF
    assert verdict.reason.startswith(NOT_OFF)
    assert verdict.measures["field"] == field
    assert verdict.measures["reasoning_chars"] == chars


def test_reasoning_asked_needs_reasoning() -> None:
    assert judge_control("on", {"content": "Paris", "reasoning_content": "Capital."}).ok
    assert judge_control("on", {"content": "<think>Capital.</think>Paris"}).ok
    missing = judge_control("on", {"content": "Paris", "reasoning_content": "  "})
    assert not missing.ok
    assert missing.measures["control_class"] == NOT_ON


def test_engine_default_records_without_judging() -> None:
    verdict = judge_control("engine default", {"content": "Paris", "reasoning": "Capital."})
    assert verdict.ok
    assert verdict.measures["seen"] is True


def test_an_unknown_control_is_the_suites_error() -> None:
    with pytest.raises(ValueError, match="unknown reasoning control"):
        judge_control("low", {"content": "x"})


def test_stream_keeps_each_reasoning_field() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"reasoning_content": "Cap"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning_content": "ital."}}]},
        {"choices": [{"index": 0, "delta": {"content": "Paris"}, "finish_reason": "stop"}]},
        {"choices": [], "usage": {"completion_tokens": 3}},
    ]
    message = stream_message(chunks)
    assert message == {"content": "Paris", "reasoning_content": "Capital."}
    assert reasoning_seen(message).field == "reasoning_content"


def _exchange(tag: str, message: dict | None = None, **extra: object) -> dict:
    row: dict = {"tag": tag, "request": {"method": "POST", "path": "/v1/chat/completions"}}
    if message is not None:
        row |= {"status": 200, "response": {"choices": [{"message": message}]}}
    return row | extra


def test_rows_only_for_answered_chat_completions() -> None:
    exchanges = [
        _exchange("a", {"content": "Paris"}),
        _exchange("b", status=400, response={"error": {"message": "too long"}}),
        {"tag": "models", "request": {"path": "/v1/models"}, "status": 200, "response": {}},
        {"tag": "c", "request": {"path": "/v1/completions"}, "status": 200,
         "response": {"choices": [{"text": "<think>x</think>"}]}},  # no chat template
        _exchange("d", status=200, chunks=[
            {"t": 0.1, "data": {"choices": [{"index": 0, "delta": {"reasoning": "hm"}}]}},
            {"t": 0.2, "data": {"choices": [{"index": 0, "delta": {"content": "Au"}}]}},
        ]),
    ]  # fmt: skip
    rows = control_rows("off", exchanges)
    assert [(r["tag"], r["ok"]) for r in rows] == [("a", True), ("d", False)]
    assert rows[1]["field"] == "reasoning" and rows[1]["reason"].startswith(NOT_OFF)


def _run(tmp_path: Path, asked: str | None, exchanges: list[dict], proofs: list[dict]) -> GateRun:
    (tmp_path / "deterministic.jsonl").write_text("".join(json.dumps(x) + "\n" for x in exchanges))
    (tmp_path / "deterministic_control.jsonl").write_text(
        "".join(json.dumps(p) + "\n" for p in proofs)
    )
    resolved = {"control": asked} if asked else {}
    return GateRun(tmp_path, {}, "vllm", 8192, resolved)


def test_verify_rederives_the_proofs_and_names_a_tampered_row(tmp_path: Path) -> None:
    exchanges = [_exchange("p#0", {"content": "Paris", "reasoning_content": "Capital."})]
    honest = control_rows("off", exchanges)
    out = Rederived()
    control(_run(tmp_path, "off", exchanges, honest), "deterministic", out)
    assert not out.mismatches
    assert out.failures == [f"deterministic.jsonl p#0: {honest[0]['reason']}"]

    tampered = [{**honest[0], "ok": True, "seen": False}]
    out = Rederived()
    control(_run(tmp_path, "off", exchanges, tampered), "deterministic", out)
    assert {m.what for m in out.mismatches} == {
        "deterministic_control.jsonl ok",
        "deterministic_control.jsonl seen",
    }


def test_verify_names_an_answer_without_its_proof(tmp_path: Path) -> None:
    exchanges = [_exchange("p#0", {"content": "Paris"}), _exchange("p#1", {"content": "Paris"})]
    out = Rederived()
    control(_run(tmp_path, "off", exchanges, control_rows("off", exchanges[:1])), "deterministic",
            out)  # fmt: skip
    assert [m.record for m in out.mismatches] == ["deterministic.jsonl p#1"]


def test_a_run_recorded_before_controls_has_nothing_to_rederive(tmp_path: Path) -> None:
    exchanges = [_exchange("p#0", {"content": "<think>x</think>Paris"})]
    out = Rederived()
    control(_run(tmp_path, None, exchanges, []), "deterministic", out)
    assert not out.mismatches and not out.failures and not out.rows


# The controls of the user's 2026-08-01 campaign (fakoli/anvil-serving
# docs/findings/2026-08-01-dual-pro-tp2-campaign-evidence/*-control.json and the preflight JSONs
# they name): thinking disabled through chat_template_kwargs for Qwen3.5, Nemotron and Laguna;
# reasoning_effort=low with 512 visible + 4,096 headroom tokens for DeepSeek and Inkling.
OFF_BY_TEMPLATE = [
    "qwen3.5-122b-a10b-nvfp4",
    "qwen3.5-122b-a10b-nvfp4-tp1",
    "nemotron-3-super-120b-a12b-nvfp4",
    "nemotron-3-super-120b-a12b-nvfp4-tp1",
    "laguna-s-2.1-nvfp4",
    "laguna-s-2.1-nvfp4-tp1",
    "laguna-s-2.1-nvfp4-dflash",
]
LOW_EFFORT = ["deepseek-v4-flash-0731", "inkling-small-nvfp4", "inkling-small-nvfp4-mxfp8kv"]


@pytest.fixture(scope="module")
def campaign() -> dict:
    return {c.name: c for c in load_candidates([CANDIDATES])}


@pytest.mark.parametrize("name", OFF_BY_TEMPLATE)
def test_thinking_disabled_as_the_user_qualified(campaign: dict, name: str) -> None:
    candidate = campaign[name]
    assert candidate.reasoning_control == "off"
    kwargs = candidate.request_settings["extra"]["chat_template_kwargs"]
    assert kwargs == {"enable_thinking": False}


@pytest.mark.parametrize("name", LOW_EFFORT)
def test_low_effort_with_512_visible_and_4096_headroom(campaign: dict, name: str) -> None:
    candidate = campaign[name]
    assert candidate.reasoning_control == "on"
    assert candidate.request_settings["extra"]["reasoning_effort"] == "low"
    for gate, key in [("deterministic", "max_tokens"), ("tool_calls", "max_tokens"),
                      ("capacity", "needle_max_tokens")]:  # fmt: skip
        assert candidate.gate(gate)[key] == 512 + 4096, (gate, key)


def test_every_candidate_states_a_control_or_has_no_parser(campaign: dict) -> None:
    """A serve with a reasoning parser says what it asks for; one without must return none."""
    for candidate in campaign.values():
        parser = (candidate.spec["engine"].get("parsers") or {}).get("reasoning")
        stated = candidate.request_settings.get("reasoning")
        assert stated or not parser, f"{candidate.name}: reasoning parser {parser}, no control"


def test_plan_shows_each_campaign_candidates_control(campaign: dict) -> None:
    for name in OFF_BY_TEMPLATE:
        lines = control_lines(campaign[name])
        assert lines[0].startswith("reasoning off (stated;"), lines
        assert '"enable_thinking": false' in lines[1], lines
    for name in LOW_EFFORT:
        lines = control_lines(campaign[name])
        assert lines[0].startswith("reasoning on (stated;"), lines
        assert '"reasoning_effort": "low"' in lines[1], lines
        budgets = "deterministic 4608, tool_calls 4608, capacity 4608"
        assert lines[3] == f"short-answer budgets: {budgets}"
