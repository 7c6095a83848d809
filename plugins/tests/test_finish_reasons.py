"""Allowed finish reasons (issue 39): every answer ends the way its gate allows, with a visible
answer, or fails with its class, even when its words are right. The pure rule
(``checks.answers.check_finish``) is the one gate 03, gate 06 and verify's re-derivation use; a
run recorded before the rule names no ``finish_reasons`` and is re-derived by its own rule.
"""

from __future__ import annotations

import json
from pathlib import Path

from tp2qual.candidate import GATE_DEFAULTS
from tp2qual.checks.answers import check_budgeted_answer, check_finish
from tp2qual.checks.known_answers import judge_known_answer
from tp2qual.checks.needle import judge_needle
from tp2qual.checks.repetition import Thresholds, judge_long_output
from tp2qual.checks.tool_modes import judge_result_answer
from tp2qual.evidence.rederive.common import GateRun
from tp2qual.evidence.rederive.deterministic import deterministic
from tp2qual.perf.sampling import judge_ending

RUN = (
    Path(__file__).with_name("data")
    / "smollm2-135m-local-run"
    / "20261203T074653Z-f8ce"
    / "smollm2-135m-local"
)
STOP = ["stop"]


def test_each_ending_outside_the_allowed_fails_with_its_class() -> None:
    cases = [
        (("Paris.", "", "length"), "visible budget exhausted"),
        (("", "Let me think", "length"), "reasoning budget exhausted"),
        (("", "", "stop"), "no visible answer"),
        (("", "thought it through", "stop"), "no visible answer"),
        (("", "", "length"), "no visible answer"),
        (("Paris.", "", "content_filter"), "unexpected finish reason 'content_filter'"),
        (("Paris.", "", None), "unexpected finish reason None"),
    ]
    for (answer, reasoning, finish), cls in cases:
        got = check_finish(answer, reasoning, finish, STOP)
        assert not got.ok and got.measures["finish_class"] == cls, (finish, got)
        assert got.reason.startswith(cls)
    assert check_finish("Paris.", "", "stop", STOP).ok
    # a long output's cap is allowed where the gate says so, still not an empty one
    assert check_finish("sails and sails", "", "length", ["stop", "length"]).ok
    assert not check_finish("", "", "length", ["stop", "length"]).ok


def test_a_right_answer_cut_at_length_fails_visible_budget_exhausted() -> None:
    got = check_budgeted_answer("Shakespeare wrote it in 15", "", "length", 32, ["Shakespeare"],
                                allowed=STOP)  # fmt: skip
    assert not got.ok and got.measures["finish_class"] == "visible budget exhausted"
    # the rule a run from before finish reasons were judged was decided by (no setting)
    assert check_budgeted_answer("Shakespeare wrote it", "", "length", 32, ["Shakespeare"]).ok
    prompt = {"id": "romeo", "expect": ["Shakespeare"]}
    right, cut = {"content": "Shakespeare."}, {"content": "Shakespeare wrote it in 15"}
    judged = judge_known_answer(prompt, [(right, "stop"), (right, "length")], 32, STOP)
    assert not judged.correct.ok and judged.correct.reason.startswith("repeat 1: visible budget")
    judged = judge_known_answer(prompt, [(cut, "length")] * 2, 32, STOP)
    assert judged.row()["finish_class"] == "visible budget exhausted"
    assert "finish_class" not in judge_known_answer(prompt, [(right, "stop")] * 2, 32, STOP).row()


def test_the_needle_must_stop() -> None:
    settings = GATE_DEFAULTS["capacity"] | {"needle_answer": "Lisbon"}
    row, wrong = judge_needle({"content": "Lisbon, the"}, "length", 1849, 2048, settings)
    assert not row["ok"] and row["finish_class"] == "visible budget exhausted", wrong
    row, _ = judge_needle({"content": "Lisbon."}, "stop", 1849, 2048, settings)
    assert row["ok"] and "finish_class" not in row


def test_gates_state_their_allowed_finish_reasons() -> None:
    allowed = {g: GATE_DEFAULTS[g].get("finish_reasons") for g in GATE_DEFAULTS}
    assert allowed["deterministic"] == ["stop"] and allowed["capacity"] == ["stop"]
    assert allowed["repetition"] == ["stop", "length"]


def _settings() -> dict:
    candidate = json.loads((RUN / "identity" / "candidate.json").read_text())
    return dict(candidate["gates"]["deterministic"])


def test_verify_rederives_a_recorded_run_by_the_rule_it_ran_under() -> None:
    """The real llama.cpp run of 2026-12-03 (max_tokens 32) ended two known answers at
    ``length``; it recorded no finish_reasons, so it verifies as decided. The same raw answers
    under today's rule re-derive as FAILs of class "visible budget exhausted"."""
    recorded = _settings()
    assert "finish_reasons" not in recorded
    as_run = deterministic(GateRun(RUN, recorded, "llama.cpp", 2048))
    assert not as_run.mismatches and not as_run.failures
    today = deterministic(GateRun(RUN, recorded | {"finish_reasons": STOP}, "llama.cpp", 2048))
    cut = {m.record for m in today.mismatches if m.what.endswith(" correct")}
    assert cut == {f"deterministic.jsonl {p}#0" for p in ("romeo-and-juliet", "opposite-of-hot")}
    rows = {r["id"]: r for r in today.rows["deterministic_verdicts.jsonl"]}
    assert rows["romeo-and-juliet"]["finish_class"] == "visible budget exhausted"
    assert "Shakespeare" in rows["romeo-and-juliet"]["answer"]


def test_a_long_output_may_hit_its_cap_but_not_inside_its_reasoning() -> None:
    settings = GATE_DEFAULTS["repetition"]
    allowed, thresholds = settings["finish_reasons"], Thresholds.from_mapping({})
    essay = {"content": "Ships carried cargo across the sea for thousands of years."}
    assert judge_long_output(essay, "length", thresholds, allowed).ok
    thinking = {"content": None, "reasoning_content": "First, the Phoenicians built galleys."}
    got = judge_long_output(thinking, "length", thresholds, allowed)
    assert got.measures["finish_class"] == "reasoning budget exhausted"
    assert judge_long_output(thinking, "length", thresholds, None).ok  # the pre-rule record
    empty = judge_long_output({"content": ""}, "stop", thresholds, allowed)
    assert empty.measures["finish_class"] == "no visible answer"


def test_the_answer_after_a_tool_result_must_stop_with_visible_text() -> None:
    allowed = GATE_DEFAULTS["tool_calls"]["finish_reasons"]
    quoted = {"content": "It is 21 degrees and sunny in Paris."}
    assert judge_result_answer(quoted, "stop", ["21"], allowed).ok
    got = judge_result_answer(quoted, "length", ["21"], allowed)
    assert got.measures["finish_class"] == "visible budget exhausted"
    assert judge_result_answer(quoted, "length", ["21"], None).ok  # the pre-rule record
    got = judge_result_answer({"content": None}, "tool_calls", ["21"], allowed)
    assert got.measures["finish_class"] == "no visible answer"


def _chunk(finish: str | None = None, **delta: str) -> dict:
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def test_a_throughput_sample_may_be_capped_but_must_show_text() -> None:
    allowed = GATE_DEFAULTS["throughput"]["finish_reasons"]
    timed = {"ok": True, "decode_tok_s": 40.0}
    capped = [_chunk(content="Water "), _chunk(content="flows"), _chunk("length")]
    assert judge_ending(timed, capped, allowed) == timed | {"finish_reason": "length"}
    thinking = [_chunk(reasoning_content="Let me "), _chunk("length", reasoning_content="plan")]
    got = judge_ending(timed, thinking, allowed)
    assert not got["ok"] and got["finish_class"] == "reasoning budget exhausted"
    assert judge_ending(timed, thinking, None) == timed  # the pre-rule record
    odd = judge_ending(timed, [_chunk(content="Water"), _chunk("abort")], allowed)
    assert odd["finish_class"] == "unexpected finish reason 'abort'"
