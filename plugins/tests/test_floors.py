"""Throughput floors (perf/floors.py): rates at least their floor, latencies at most, each floor
with its source; derived floors from the comparison and the roofline, or why they cannot be."""

from __future__ import annotations

import pytest

from tp2qual.evidence.performance_view import floor_facts, floor_of
from tp2qual.perf import floors
from tp2qual.perf.comparison import compare_baseline, roofline_for

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
    base = {"date": "2026-07-28", "source": "s", "figures": {"decode_tok_s_median": 65.0}}
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
