"""The campaign rehearsed at its own size (issue 35): every request every shipped campaign
candidate's gates will send (TP1 references and lanes included), sized from the real candidate
files by the functions the gates size them by, and none that the suite itself would fail, time
out or run out of memory on before the model is judged. Each rule is tried at the campaign's
own bounds (32k, 64k, 262k) and needle budget (4096), not only SmolLM2's. Pure: no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tp2qual
from tp2qual import prefill
from tp2qual.accuracy_asked import items_asked
from tp2qual.budget import TimeBudget
from tp2qual.candidate import GATE_DEFAULTS, Candidate, load_candidates
from tp2qual.checks.agreement import NEAR_BOUND, OWN
from tp2qual.checks.agreement import WARM as WARM_KIND
from tp2qual.checks.agreement.evaluate import evaluate
from tp2qual.checks.agreement.near_bound import ECHO, near_bound_plan
from tp2qual.checks.agreement.near_bound import WARM as WARM_CHECK
from tp2qual.checks.needle import fill_reaches, needle_plan
from tp2qual.rehearsal import Room, echo_fits, plan_lines, rehearse, shipped_from
from tp2qual.serving.server import prompt_chars

MAIN = Path(__file__).resolve().parents[2]
DATA = Path(tp2qual.__file__).parent / "data"
SHIPPED = shipped_from(
    json.loads((DATA / "agreement_prompts.json").read_text()),
    json.loads((DATA / "arithmetic_items.json").read_text()),
)
CAMPAIGN = [c for c in load_candidates([MAIN / "candidates"]) if c.spec.get("campaign")]
BOUNDS = (32768, 65536, 262144)  # the campaign's own bounds
CAMPAIGN_CAPACITY = {"fill": 0.9, "needle_max_tokens": 4096}  # _campaign-tp2.toml


def test_every_shipped_campaign_candidate_and_lane_is_rehearsed() -> None:
    names = {c.name for c in CAMPAIGN}
    assert {c.max_model_len for c in CAMPAIGN} >= set(BOUNDS)
    assert any(c.tp == 1 for c in CAMPAIGN) and any(c.spec.get("lane") for c in CAMPAIGN)
    # 5 TP2 baselines, 3 TP1 references, 3 lanes, 5 capacity-protocol lanes
    assert len(names) == 16, sorted(names)


@pytest.mark.parametrize("serve", CAMPAIGN, ids=[c.name for c in CAMPAIGN])
def test_no_campaign_request_fails_by_the_suites_own_arithmetic(serve: Candidate) -> None:
    rehearsal = rehearse(serve, SHIPPED, items_asked(serve, CAMPAIGN))
    assert rehearsal.requests
    assert not rehearsal.problems, "\n".join(rehearsal.problems)


@pytest.mark.parametrize("bound", [8192, *BOUNDS])  # 8192: issue 35's vLLM CPU try
def test_the_needle_prompt_fits_with_its_budget_and_reaches_its_own_fill(bound: int) -> None:
    plan = needle_plan(bound, CAMPAIGN_CAPACITY)
    assert plan.prompt_tokens + plan.budget <= bound  # the engine does not refuse it
    assert fill_reaches(plan.prompt_tokens / bound, plan.wanted_fill)
    assert plan.wanted_fill <= CAMPAIGN_CAPACITY["fill"]
    # a calibration that counts the prompt 5 % of the bound short still leaves the budget room
    assert plan.prompt_tokens + 0.05 * bound + plan.budget <= bound
    if bound == 262144:  # room for all of it: the fill asked, as before
        assert plan.prompt_tokens == int(0.9 * bound)


@pytest.mark.parametrize("bound", BOUNDS)
def test_the_near_bound_decode_gets_time_for_its_prompt(bound: int) -> None:
    plan = near_bound_plan(bound, {"near_bound_fill": 0.75, "near_bound_max_tokens": 32})
    prefill_s = plan.prompt_tokens / prefill.assumed_tok_s()
    budget = TimeBudget(floor_tok_s=10.0)
    flat = budget.seconds_for(plan.max_tokens)  # what a deadline of the reply alone gives
    assert flat < prefill_s or bound < 100_000  # 262k: 196,608 tokens, over the flat 60 s
    assert budget.seconds_for(plan.max_tokens, plan.prompt_tokens) >= prefill_s + 32 / 10.0


def test_the_assumed_prefill_rate_is_the_slowest_on_record_with_its_margin() -> None:
    rates = sorted(r.tok_s for r in prefill.RECORDS)
    assert prefill.assumed_tok_s() == rates[0] / prefill.PREFILL_MARGIN
    assert round(rates[0]) == 3353 and round(prefill.assumed_tok_s()) == 1676  # 231k / 68.9 s


def test_a_prompt_logprob_peak_is_one_chunk_of_the_vocabulary() -> None:
    room = Room(6.56, 8192, 248320, "vLLM at 0.90 of 95.59 GiB less 3 GiB")
    assert room.peak_gib(196_640) == pytest.approx(8192 * 248320 * 6 / 1024**3)  # 11.37 GiB
    assert room.peak_gib(265) == pytest.approx(265 * 248320 * 6 / 1024**3)  # a shipped reread
    assert Room(1.0, 8192, None, "").peak_gib(196_640) is None  # no vocab on record


def test_the_plan_shows_each_gates_largest_request_with_its_deadline_and_rate() -> None:
    qwen = next(c for c in CAMPAIGN if c.name == "qwen3.5-122b-a10b-nvfp4")
    lines = plan_lines(rehearse(qwen, SHIPPED, items_asked(qwen, CAMPAIGN)))
    assert "tok/s = the slowest prefill on record" in lines[0]
    for gate in ("deterministic", "capacity", "agreement", "throughput"):
        line = next(ln for ln in lines if ln.startswith(f"{gate}: "))
        assert "deadline" in line and "needs" in line


def test_a_deadline_counts_its_prompt_where_the_gate_knows_it_else_its_characters() -> None:
    budget = TimeBudget(floor_tok_s=10.0)
    assert prompt_chars({"prompt": "abc", "max_tokens": 1}) == 3
    assert prompt_chars({"messages": [{"role": "user", "content": "hello"}]}) == 5
    extra = budget.seconds_for(32, 196_608) - budget.seconds_for(32)
    assert extra == pytest.approx(196_608 / prefill.assumed_tok_s())  # about two minutes
    assert "a 196608-token prompt at 1676 tok/s" in budget.explain(32, 196_608)
    assert TimeBudget(fixed_s=5.0).seconds_for(32, 196_608) == 5.0  # a gate's own stays its own


def _row(token: str, logprob: float) -> dict[str, object]:
    return {"token": token, "logprob": logprob, "top": [[token, logprob], ["zz", -4.0]]}


def test_near_the_bound_a_decode_is_held_against_its_warm_decode_where_no_echo_fits() -> None:
    rows = [_row(t, -0.1) for t in ("a", " b", " c", " d")]
    own = {"kind": OWN, "id": NEAR_BOUND, "prompt": "p", "text": "a b c d",
           "finish_reason": "length", "tokens": rows}  # fmt: skip
    same = evaluate([own, {**own, "kind": WARM_KIND}], GATE_DEFAULTS["agreement"])
    assert same.problems == [] and same.claims["near_bound_judgement"] == "agrees"
    moved = [_row(r["token"], -0.9) for r in rows]  # every position 0.8 nat off
    apart = evaluate([own, {**own, "kind": WARM_KIND, "tokens": moved}], GATE_DEFAULTS["agreement"])
    said = "self-consistency near the bound (decode against its warm decode)"
    assert any(said in p for p in apart.problems), apart.problems


@pytest.mark.parametrize(
    ("name", "check"),
    [("qwen3.5-122b-a10b-nvfp4", WARM_CHECK), ("laguna-s-2.1-nvfp4", WARM_CHECK),
     ("smollm2-135m-local", ECHO)],
)  # fmt: skip
def test_an_echo_near_the_bound_only_where_its_peak_is_known_to_fit(name: str, check: str) -> None:
    candidate = next(c for c in load_candidates([MAIN / "candidates"]) if c.name == name)
    settings = candidate.gate("agreement")
    sized = near_bound_plan(candidate.max_model_len, settings)
    fits, why = echo_fits(candidate, sized.prompt_tokens + sized.max_tokens)
    assert near_bound_plan(candidate.max_model_len, settings, fits).check == check, why
    assert ("over the 6.56 GiB" in why) if name.startswith("qwen") else why
