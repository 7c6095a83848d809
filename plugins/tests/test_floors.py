"""Throughput floors (perf/floors.py): rates at least their floor, latencies at most, each floor
with its source and basis; derived floors of the reference's or a lane baseline's measured
figure, of the comparison and of the roofline, the fallback where the basis is missing, or why
they cannot be; the request budget that follows the floor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate
from tp2qual.evidence.performance_view import floor_facts, floor_of
from tp2qual.perf import floors
from tp2qual.perf.comparison import compare_baseline, roofline_for
from tp2qual.perf.floor_basis import MeasuredBasis, unmeasured

SAMPLES = [
    {"ttft_s": 0.2 + i / 100, "decode_tok_s": 60.0 + i, "tpot_s": 1 / (60 + i)} for i in range(5)
]
MODEL = {"active_params_b": 10, "bits_per_weight": 4.5}
ROOF = roofline_for(MODEL, {"bandwidth_gbs": 1792}, None, 2, None)  # 637 tok/s


@pytest.mark.parametrize(
    ("key", "direction"),
    [("decode_tok_s_median", "≥"), ("ttft_s_p90", "≤"), ("tpot_s_mean", "≤"),
     ("itl_p99_s_median", "≤"), ("e2e_s_max", "≤")],
)  # fmt: skip
def test_every_figure_has_its_direction(key: str, direction: str) -> None:
    (floor,) = floors.written_floors({"floors": {key: 1.0}, "why": "w"})
    assert floor.direction == direction


def test_a_ttft_floor_is_an_upper_bound() -> None:
    """Read as a lower bound, a TTFT floor would pass the slow serve and fail the fast one."""
    median = 0.22
    fast = floors.written_floors({"floors": {"ttft_s_median": 0.5}})
    slow = floors.written_floors({"floors": {"ttft_s_median": 0.1}})
    assert floors.misses(fast, SAMPLES) == []
    assert floors.misses(slow, SAMPLES) == [f"ttft_s_median = {median:.4g}, floor ≤ 0.1 (written)"]


def test_a_rate_floor_is_a_lower_bound() -> None:
    assert (
        floors.misses(floors.written_floors({"floors": {"decode_tok_s_median": 50}}), SAMPLES) == []
    )
    missed = floors.misses(floors.written_floors({"floors": {"decode_tok_s_p90": 70}}), SAMPLES)
    assert missed and "floor ≥ 70" in missed[0]


def test_a_floor_on_a_figure_no_sample_has_is_a_miss() -> None:
    missed = floors.misses(floors.written_floors({"floors": {"itl_p50_s_median": 1.0}}), SAMPLES)
    assert missed == ["itl_p50_s_median: no measured sample has itl_p50_s"]


def test_a_written_floor_carries_its_why() -> None:
    (floor,) = floors.written_floors(
        {"floors": {"decode_tok_s_median": 5}, "why": "a broken build"}
    )
    assert floor.source == "written in the candidate: a broken build"
    assert floor.line() == "decode_tok_s_median ≥ 5  (written in the candidate: a broken build)"


def test_no_floor_is_said_plainly_never_floors_met() -> None:
    judged = floors.judged_floors({}, {"baseline": None}, ROOF)
    assert judged.floors == () and judged.lines() == [floors.NO_FLOOR]
    assert judged.as_dict()["note"] == floors.NO_FLOOR


def test_a_roofline_floor_is_its_fraction_of_the_bound_with_its_source() -> None:
    rule = {"decode_tok_s_median": {"fraction": 0.03, "of": "roofline", "why": "broken serve"}}
    (floor,) = floors.judged_floors({"derived_floors": rule}, {}, ROOF).floors
    assert floor.value == pytest.approx(0.03 * ROOF["bound_tok_s"])
    assert floor.direction == "≥"
    assert floor.source.startswith(
        "0.03 x the roofline 637.2 tok/s (1792 GB/s, gpus.bandwidth_gbs)"
    )
    assert floor.source.endswith("; broken serve")


def test_a_baseline_floor_comes_only_from_a_figure_of_the_same_definition() -> None:
    rule = {"decode_tok_s_median": {"fraction": 0.8, "of": "baseline", "why": "w"}}
    base = {"date": "2026-07-28", "source": "s", "tp": 1, "figures": {"decode_tok_s_median": 65.0}}
    same = compare_baseline(
        {}, {**base, "definitions": {"decode_tok_s_median": "perf/sampling.py"}}
    )
    (floor,) = floors.judged_floors({"derived_floors": rule}, same, ROOF).floors
    assert floor.value == pytest.approx(52.0) and "TP1 baseline 65 (2026-07-28)" in floor.source
    other = compare_baseline({}, {**base, "definitions": {"decode_tok_s_median": "aggregate"}})
    judged = floors.judged_floors({"derived_floors": rule}, other, ROOF)
    assert judged.floors == ()
    assert judged.not_derived == (
        "derived_floors.decode_tok_s_median (of baseline): the baseline figure is not compared: "
        "not the same definition as the suite's (perf/sampling.py): aggregate",
    )


def test_a_roofline_that_cannot_be_computed_derives_no_floor() -> None:
    rule = {"decode_tok_s_median": {"fraction": 0.03, "of": "roofline", "why": "w"}}
    unknown = roofline_for({}, {}, None, 2, None)
    (why,) = floors.judged_floors({"derived_floors": rule}, {}, unknown).not_derived
    assert "the roofline is not computed (needs model.active_params_b" in why


@pytest.mark.parametrize(
    ("name", "value", "meets"),
    [("ttft_s_median", 0.2, True), ("ttft_s_median", 0.6, False),
     ("decode_tok_s_median", 30.0, True), ("decode_tok_s_median", 10.0, False),
     ("e2e_s_median", 1.0, None)],
)  # fmt: skip
def test_a_claim_meets_its_written_floor_in_the_floors_direction(
    name: str, value: float, meets: bool | None
) -> None:
    settings = {"floors": {"ttft_s_median": 0.5, "decode_tok_s_median": 20.0}}
    assert floors.claim_meets(name, value, settings) is meets


def test_the_report_states_each_floor_or_that_none_was_set() -> None:
    written = floors.judged_floors({"floors": {"ttft_s_p90": 2.0}, "why": "w"}, {}, ROOF)
    assert floor_facts(written.as_dict()) == [
        ("floor ttft_s_p90", "≤ 2 (written in the candidate: w)")
    ]
    assert floor_facts(floors.judged_floors({}, {}, ROOF).as_dict()) == [
        ("floors", floors.NO_FLOOR)
    ]
    assert floor_of("ttft_s", {"ttft_s_p90": 2.0}, "s") == (2.0, "floor: p90 ≤ 2 s")


# ---------------------------------------------------------------- floors of a measured figure

REF_SAMPLES = tuple({"phase": "sample", "decode_tok_s": 60.0 + i, "ttft_s": 0.2} for i in range(5))
SETTINGS = {"prompt_words": 96, "max_tokens": 128, "min_tokens": None}


def _basis(role: str = "reference", **changes: object) -> MeasuredBasis:
    fields = dict(role=role, candidate="tp1", run="20261202T000000Z-aaaa", source="this run",
                  samples=REF_SAMPLES, settings=SETTINGS)  # fmt: skip
    return MeasuredBasis(**{**fields, **changes})  # type: ignore[arg-type]


def _rule(of: str = "reference", fraction: float = 0.6, **more: object) -> dict:
    return {"decode_tok_s_median": {"of": of, "fraction": fraction, "why": "topology", **more}}


def test_a_floor_of_the_reference_is_its_fraction_of_the_references_measured_figure() -> None:
    settings = {"derived_floors": _rule(), **SETTINGS}
    (floor,) = floors.derive_floors(settings, {}, ROOF, {"reference": _basis()}).floors
    assert floor.value == pytest.approx(0.6 * 62.0) and floor.direction == "≥"
    assert (floor.basis, floor.of_candidate, floor.of_value) == ("reference", "tp1", 62.0)
    assert (
        floor.source
        == "0.6 x tp1's decode_tok_s_median 62 (this run, 20261202T000000Z-aaaa); topology"
    )
    assert floor.brief() == (
        "decode_tok_s_median ≥ 37.2 (0.6 x the reference tp1's 62, run 20261202T000000Z-aaaa)"
    )
    missed = floors.misses([floor], [{"decode_tok_s": 31.0}])
    assert missed == [f"decode_tok_s_median = 31, floor ≥ 37.2 {floor.basis_words()}"]


def test_a_latency_floor_of_the_reference_is_a_ceiling() -> None:
    rule = {"ttft_s_median": {"of": "reference", "fraction": 2.0, "why": "prefill"}}
    settings = {"derived_floors": rule, **SETTINGS}
    (floor,) = floors.derive_floors(settings, {}, ROOF, {"reference": _basis()}).floors
    assert (floor.direction, floor.value) == ("≤", pytest.approx(0.4))
    assert floors.misses([floor], [{"ttft_s": 0.5}]) and not floors.misses(
        [floor], [{"ttft_s": 0.3}]
    )


def test_a_speed_lane_is_judged_against_its_baseline() -> None:
    settings = {"derived_floors": _rule("lane_baseline", 1.0), **SETTINGS}
    bases = {"lane_baseline": _basis("lane_baseline", candidate="base")}
    (floor,) = floors.derive_floors(settings, {}, ROOF, bases).floors
    assert (floor.basis, floor.value) == ("lane_baseline", 62.0)
    assert floors.misses([floor], [{"decode_tok_s": 61.9}])  # slower than its baseline: a miss


def test_without_the_reference_the_fallback_is_used_and_said() -> None:
    fallback = {"of": "roofline", "fraction": 0.03, "why": "broken serve"}
    settings = {"derived_floors": _rule(fallback=fallback), **SETTINGS}
    none = {"reference": "tp1 has no PASS with throughput samples in this run"}
    (floor,) = floors.derive_floors(settings, {}, ROOF, none).floors
    assert floor.basis == "roofline" and floor.value == pytest.approx(0.03 * ROOF["bound_tok_s"])
    assert floor.source.endswith(
        "(no reference: tp1 has no PASS with throughput samples in this run)"
    )
    written = {"value": 10.0, "why": "a ceiling"}
    rule = {"ttft_s_median": {"of": "reference", "fraction": 2.0, "why": "w", "fallback": written}}
    (ttft,) = floors.derive_floors({"derived_floors": rule}, {}, ROOF, none).floors
    assert (ttft.basis, ttft.value, ttft.brief()) == (
        "written",
        10.0,
        "ttft_s_median ≤ 10 (written)",
    )


def test_figures_measured_another_way_are_not_a_basis() -> None:
    """Another prompt or output length is another figure: the fallback, never a division."""
    fallback = {"of": "roofline", "fraction": 0.03, "why": "w"}
    settings = {"derived_floors": _rule(fallback=fallback), **SETTINGS, "max_tokens": 256}
    (floor,) = floors.derive_floors(settings, {}, ROOF, {"reference": _basis()}).floors
    assert floor.basis == "roofline"
    assert "measured another way (max_tokens 128 there, 256 here)" in floor.source


def test_a_floor_that_cannot_be_derived_raises_one_typed_error() -> None:
    settings = {"derived_floors": _rule(), **SETTINGS}
    with pytest.raises(floors.FloorNotDerived) as caught:
        floors.derive_floors(settings, {}, ROOF, {"reference": "tp1 has no PASS"})
    assert caught.value.problems == (
        "derived_floors.decode_tok_s_median (of reference): tp1 has no PASS",
    )
    judged = floors.judged_floors(settings, {}, ROOF, {})  # --plan and verify: said, not raised
    assert judged.not_derived == (
        "derived_floors.decode_tok_s_median (of reference): no reference named",
    )


def test_the_file_must_name_what_a_floor_is_a_fraction_of() -> None:
    spec = {"model": {}, "gpus": {}}
    assert floors.derivation_problems({"derived_floors": _rule()}, spec) == [
        "gates.throughput.derived_floors.decode_tok_s_median: of the reference, but the "
        "candidate names none ([reference] candidate or [lane] after)"
    ]
    written = _rule(fallback={"value": 5.0, "why": "w"})
    assert floors.derivation_problems({"derived_floors": written}, spec) == []
    named = {**spec, "reference": {"candidate": "tp1"}}
    assert floors.derivation_problems({"derived_floors": _rule()}, named) == []
    lane = floors.derivation_problems({"derived_floors": _rule("lane_baseline")}, named)
    assert lane and "[lane] after" in lane[0]
    roof = {"of": "roofline", "fraction": 0.1, "why": "w"}
    ttft = {"ttft_s_median": {"of": "reference", "fraction": 2, "why": "w", "fallback": roof}}
    assert (
        "ttft_s_median.fallback: the roofline bounds decode_tok_s only"
        in (floors.key_problems({"derived_floors": ttft})[0])
    )


def test_the_floors_say_which_basis_each_rests_on() -> None:
    settings = {"derived_floors": _rule(), "floors": {"ttft_s_p90": 2.0}, "why": "w", **SETTINGS}
    judged = floors.derive_floors(settings, {}, ROOF, {"reference": _basis()})
    assert judged.as_dict()["bases"] == (
        "ttft_s_p90: written; decode_tok_s_median: reference tp1 (run 20261202T000000Z-aaaa)"
    )
    assert floors.budget_floor(judged) == judged.floors[1]


def test_the_plan_states_each_rule_and_its_fallback() -> None:
    fallback = {"of": "roofline", "fraction": 0.03, "why": "broken serve"}
    settings = {"derived_floors": _rule(fallback=fallback), **SETTINGS}
    spec = {"reference": {"candidate": "tp1"}}
    judged = floors.judged_floors(settings, {}, ROOF, unmeasured(spec, settings))
    assert floors.floor_plan_lines(settings, spec, judged) == [
        "decode_tok_s_median ≥ 0.6 x tp1's decode_tok_s_median as measured by gate 08 in this "
        "run, else in the newest earlier dated run with a PASS: topology",
        "  without it: 0.03 x the decode roofline: broken serve",
        "before any figure is measured: decode_tok_s_median ≥ 19.11 (0.03 x the roofline)",
    ]


def test_a_basis_survives_its_copy_beside_the_samples() -> None:
    basis = _basis()
    assert MeasuredBasis.from_dict(json.loads(json.dumps(basis.as_dict()))) == basis


# ---------------------------------------------------------------- the request budget


def _candidate(serve: dict | None = None, written: float | None = None) -> Candidate:
    throughput = {"floors": {"decode_tok_s_median": written}} if written else {}
    serve = {"tensor_parallel_size": 2, "max_model_len": 4096, **(serve or {})}
    spec = {"name": "c", "serve": serve, "gates": {"throughput": throughput}}
    return Candidate(Path("c.toml"), spec)


def test_the_budget_follows_the_floor_that_applies() -> None:
    """A hung 2048-token request is reported after 60 + 1.25 x 2048 / floor seconds."""
    run_floor = "decode_tok_s_median ≥ 39 (0.6 x the reference tp1's 65, run r)"
    budget = _candidate(written=5.0).time_budget("deterministic", 39.0, run_floor)
    assert budget.seconds_for(2048) == pytest.approx(60 + 1.25 * 2048 / 39)  # 125.6 s, not 22 min
    assert budget.explain(2048).endswith(f"the floor: {run_floor})")
    assert _candidate(written=5.0).time_budget().floor_tok_s == 5.0
    assert _candidate().time_budget().seconds_for(2048) == pytest.approx(60 + 1.25 * 2048 / 2)
    assert "no decode floor applies" in _candidate().time_budget().explain(16)
    explicit = _candidate({"min_decode_tok_s": 1.0}).time_budget(None, 39.0, run_floor)
    assert (explicit.floor_tok_s, explicit.floor_source) == (1.0, "serve.min_decode_tok_s")
