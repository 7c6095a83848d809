"""``--plan``'s time from the user's dated records (issue 39): the record of the candidate's own
TP size, two figures (expected, at most), the long prompts at the record's prefill rows, and
each expected answer size from a named transcript. Pure and fast: no engine, no I/O beyond the
shipped candidate files.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tp2qual.accuracy_asked import items_asked
from tp2qual.candidate import Candidate, load_candidates
from tp2qual.checks.agreement.near_bound import near_bound_plan
from tp2qual.checks.needle import needle_plan
from tp2qual.checks.tool_modes import long_aim
from tp2qual.dry_run import estimate_for
from tp2qual.perf.estimate import Estimate
from tp2qual.perf.expected_use import KINDS, Expectations, expectations_of, long_prompts
from tp2qual.perf.prefill import PrefillRow, expected_seconds, upper_seconds
from tp2qual.perf.record_rates import rested_on
from tp2qual.run_plan import time_lines

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {c.name: c for c in load_candidates([ROOT / "candidates"])}
CAMPAIGN = [c for c in SHIPPED.values() if c.spec.get("campaign")]
USER_RAW = "fakoli/anvil-serving docs/findings/"


def _curve(a: float, b: float, n: int) -> float:
    return a * n + b * n * n


@pytest.mark.parametrize("a, b", [(5e-5, 0.0), (5e-5, 4e-10), (1e-6, 1e-9)])
def test_prefill_upper_bounds_any_linear_plus_quadratic_prefill(a: float, b: float) -> None:
    """Whatever the mix of linear and attention cost, 'at most' is never below the truth, and
    two rows give the expected time exactly."""
    rows = tuple(PrefillRow(n, _curve(a, b, n)) for n in (30_000, 125_000))
    for n in (500, 10_000, 60_000, 200_000, 400_000):
        true = _curve(a, b, n)
        assert upper_seconds(rows, n) >= true * (1 - 1e-9), n
        assert expected_seconds(rows, n) == pytest.approx(true, rel=1e-6), n


def test_one_prefill_row_expects_its_rate_and_bounds_it_quadratically() -> None:
    row = (PrefillRow(20_000, 2.0),)
    assert expected_seconds(row, 40_000) == pytest.approx(4.0)  # the linear share, said lower
    assert upper_seconds(row, 40_000) == pytest.approx(8.0)  # (40K / 20K)^2 x 2 s
    assert upper_seconds(row, 10_000) == pytest.approx(1.0)


def test_an_expectation_applies_only_under_the_control_it_was_recorded_with() -> None:
    spec = {
        "gates": {"request": {"extra": {"chat_template_kwargs": {"enable_thinking": False}}}},
        "plan": {
            "expected_with": {"chat_template_kwargs": {"enable_thinking": False}},
            "expected_tokens": {"tool_call": {"tokens": 27, "source": "x.json"}},
        },
    }
    found = expectations_of(spec)
    assert found.tokens("tool_call", 1024) == 27 and found.tokens("tool_call", 10) == 10
    assert found.tokens("short_answer", 1024) == 1024  # no transcript: its budget, said
    assert any("short_answer" in line and "no transcript" in line for line in found.lines())
    thinking = {**spec, "gates": {"request": {"extra": {"chat_template_kwargs": {}}}}}
    lane = expectations_of(thinking)
    assert lane.not_applied and lane.tokens("tool_call", 1024) == 1024
    assert "every answer at its budget" in lane.lines()[0]
    assert expectations_of({}).tokens("needle_answer", 4096) == 4096


def test_the_long_prompts_follow_each_gates_own_sizing_rule() -> None:
    qwen = SHIPPED["qwen3.5-122b-a10b-nvfp4"]
    gates = {g: qwen.gate(g) for g in ("tool_calls", "capacity", "agreement")}
    length = qwen.max_model_len
    found = {p.gate: p for p in long_prompts(gates, length)}
    tools = gates["tool_calls"]
    assert (
        found["tool_calls"].tokens == long_aim(length, tools["long_fill"], tools["max_tokens"])[1]
    )
    assert found["capacity"].tokens == needle_plan(length, gates["capacity"]).prompt_tokens
    near = near_bound_plan(length, gates["agreement"]).prompt_tokens
    assert (found["agreement"].tokens, found["agreement"].passes) == (near, 2)


def _estimate(candidate: Candidate) -> Estimate:
    return estimate_for(candidate, SHIPPED, list(SHIPPED.values()))


@pytest.mark.parametrize("serve", CAMPAIGN, ids=lambda c: c.name)
def test_a_campaign_candidate_rests_on_a_record_of_its_own_tp_never_the_floor(
    serve: Candidate,
) -> None:
    rested = rested_on(serve, SHIPPED)
    assert rested is not None, serve.name
    found = _estimate(serve)
    assert "floor" not in found.decode.basis, found.decode.basis
    own = serve.spec["baseline"]
    if own.get("figures", {}).get("decode_tok_s_median") is not None:
        assert rested.record is own and not rested.converted
        assert f"TP{serve.tp} record of {own['date']}" in found.decode.basis
    else:  # the TP1 records of Nemotron and Laguna: aggregate rates only
        assert serve.tp == 1 and rested.record["tp"] == 2
        assert "tp2_gain_max" in found.decode.basis and "no decode rate" in found.decode.basis
    long = [g for g in ("tool_calls", "capacity", "agreement") if g in found.gates]
    gates = list(dict.fromkeys(t.prompt.gate for t in found.prefill.long))  # gate 06: a ladder
    assert found.prefill.rows and gates == long


@pytest.mark.parametrize("serve", CAMPAIGN, ids=lambda c: c.name)
def test_expected_is_within_the_upper_bound_gate_by_gate(serve: Candidate) -> None:
    found = _estimate(serve)
    for gate in found.gates:
        assert found.gate_seconds(gate, expected=True) <= found.gate_seconds(gate) + 1e-9, gate
        assert found.expected[gate].requests == found.gates[gate].requests, gate
    assert 0 < found.expected_seconds <= found.seconds
    lines = found.lines()
    assert lines[0].startswith("expected about ") and ", at most " in lines[0]
    items, budget = found.accuracy_items
    asked = items_asked(serve, SHIPPED.values())  # the rule the gate asks them by
    if "agreement" in found.gates and not asked.asked:  # DeepSeek: no drop to judge
        assert items == 0 and found.items_not_asked == asked.why
        assert any(line.endswith(f"its accuracy items: none, {asked.why}") for line in lines)
    elif "agreement" in found.gates:  # gate 07's items, their minutes shown apart (issue 40)
        assert items == serve.gate("agreement")["accuracy_items"] > 0
        part = found.accuracy_seconds(items, budget, expected=True)
        assert part <= found.accuracy_seconds(items, budget) <= found.gate_seconds("agreement")
        assert any(f"its {items} accuracy items" in line for line in lines)


def test_the_reasoning_serves_are_expected_to_answer_at_their_transcripts_size() -> None:
    """DeepSeek's tool call took 64 tokens at low effort; the thinking lane has no transcript."""
    deepseek = _estimate(SHIPPED["deepseek-v4-flash-0731"])
    tools = deepseek.expected["tool_calls"]
    settings = SHIPPED["deepseek-v4-flash-0731"].gate("tool_calls")
    answers = settings["repeats"]  # mode "result": one answer to the tool's result per repeat
    calls = tools.requests - answers - 2  # the long prompt's two one-token calibrations
    assert tools.tokens == calls * 64 + 2 + answers * 84
    lane = _estimate(SHIPPED["qwen3.5-122b-a10b-nvfp4-thinking"])
    assert lane.expectations.not_applied and lane.expected == lane.gates


@pytest.mark.parametrize("serve", [c for c in CAMPAIGN if c.spec.get("plan")], ids=lambda c: c.name)
def test_every_expectation_and_prefill_row_names_its_raw_json(serve: Candidate) -> None:
    plan = serve.spec["plan"]
    applies = plan["expected_with"] == serve.request_settings.get("extra", {})
    assert applies != bool(expectations_of(serve.spec).not_applied)  # a lane asking otherwise
    for kind, said in plan["expected_tokens"].items():
        assert kind in KINDS and ".json" in said["source"], (kind, said)
    for row in serve.spec["baseline"].get("prefill", []):
        assert row["raw"].startswith(USER_RAW) and row["raw"].endswith(".json"), row


def test_the_run_states_both_totals() -> None:
    names = ["qwen3.5-122b-a10b-nvfp4-tp1", "qwen3.5-122b-a10b-nvfp4"]
    ordered = [SHIPPED[n] for n in names]
    estimates = {n: _estimate(SHIPPED[n]) for n in names}
    line = time_lines(ordered, estimates, None)[0]
    expected = sum(e.expected_seconds for e in estimates.values())
    most = sum(e.seconds for e in estimates.values())
    assert (
        f"expected {round(expected / 60) // 60}:" in line
        and f"at most {round(most / 60) // 60}:" in line
    )
    spread = time_lines(ordered, estimates, {n: "a" for n in names})[1]
    assert spread.startswith("spread over 1 host(s) as placed: expected ")
    assert isinstance(Expectations().lines(), list)
