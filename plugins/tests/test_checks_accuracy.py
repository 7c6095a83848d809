"""The accuracy check (tp2qual.checks.accuracy): the shipped items are the generator's, the
scoring reads the last number, the interval and the paired drop test give known values, the
test says its power (a test that cannot fail is "not judged", never "holds"), a run may stop
once the outcome is certain, cut items are neither right nor wrong, and no item asked means no
accuracy claim (never a crash)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

import tp2qual
from tp2qual.candidate import GATE_DEFAULTS
from tp2qual.checks.accuracy import (
    detectable_drop,
    drop_power,
    drop_threshold,
    generate,
    items_needed,
    judge_accuracy,
    lost_needed,
    mcnemar_drop_p,
    score,
    settled,
    wilson,
)
from tp2qual.checks.agreement.evaluate import evaluate

SHIPPED = Path(tp2qual.__file__).parent / "data" / "arithmetic_items.json"
SETTINGS = GATE_DEFAULTS["agreement"]


def test_shipped_items_are_the_generators() -> None:
    shipped = json.loads(SHIPPED.read_text())
    assert shipped["items"] == generate(len(shipped["items"]), shipped["seed"])
    assert len(shipped["items"]) >= SETTINGS["accuracy_items"]
    assert all(isinstance(item["answer"], int) for item in shipped["items"])


@pytest.mark.parametrize(
    ("text", "ok"),
    [("So the answer is 44.", True), ("44 apples, or maybe 45", False), ("1,044", False),
     (None, False), ("She has 44", True)],
)  # fmt: skip
def test_the_last_number_is_the_answer(text: str | None, ok: bool) -> None:
    assert score(text, 44) is ok


def test_wilson_interval_known_values() -> None:
    low, high = wilson(8, 10)
    assert (round(low, 3), round(high, 3)) == (0.490, 0.943)
    assert wilson(0, 0) == (0.0, 1.0)


def test_exact_mcnemar_drop() -> None:
    assert mcnemar_drop_p(0, 0) == 1.0
    assert mcnemar_drop_p(5, 0) == 1 / 32  # five losses, no gains: p = 0.5^5
    own = {f"i{k}": k >= 6 for k in range(30)}  # lost the first six
    ref = dict.fromkeys(own, True)
    verdict = judge_accuracy(own, ref, alpha=0.05, max_drop=0.1)
    assert not verdict.ok and verdict.measures["p_drop"] == 1 / 64
    assert "exact McNemar p = 0.0156 < 0.05" in verdict.reason
    assert verdict.measures["judgement"] == "dropped" and verdict.measures["judged"] is True


def test_no_item_asked_claims_nothing() -> None:
    claims = evaluate([], SETTINGS).claims
    assert "accuracy" not in claims and "accuracy_judgement" not in claims


def answers(n: int, right: int) -> dict[str, bool | None]:
    """``n`` items, the first ``right`` of them answered right."""
    return {f"i{k:03d}": k < right for k in range(n)}


def power(correct: int, q: float, k: int) -> float:
    """P(Binomial(correct, q) >= k), summed term by term over the whole range."""
    return sum(
        math.comb(correct, j) * q**j * (1 - q) ** (correct - j) for j in range(k, correct + 1)
    )


@pytest.mark.parametrize(("alpha", "k"), [(0.05, 5), (0.01, 7), (0.0625, 5), (0.5, 2), (1.0, 1)])
def test_drop_threshold_is_the_exact_tests(alpha: float, k: int) -> None:
    assert drop_threshold(alpha) == k
    assert mcnemar_drop_p(k, 0) < alpha <= mcnemar_drop_p(k - 1, 0)


@pytest.mark.parametrize("alpha", [0.0, -0.1, 1.5])
def test_an_impossible_alpha_is_refused(alpha: float) -> None:
    with pytest.raises(ValueError, match="alpha"):
        drop_threshold(alpha)


@pytest.mark.parametrize(
    ("n", "p_ref", "expected"),
    [(70, 0.9, 0.094), (30, 0.9, 0.213), (10, 0.9, 0.571), (10, 0.2, None), (0, 0.9, None),
     (50, 0.0, None), (5, 1.0, 0.957), (4, 1.0, None)],
)  # fmt: skip
def test_detectable_drop_known_values(n: int, p_ref: float, expected: float | None) -> None:
    assert detectable_drop(n, p_ref, 0.05) == expected


@pytest.mark.parametrize(("n", "p_ref"), [(70, 0.9), (30, 0.9), (10, 0.9), (200, 0.35)])
def test_detectable_drop_is_the_smallest_on_the_grid(n: int, p_ref: float) -> None:
    d = detectable_drop(n, p_ref, 0.05)
    assert d is not None
    correct = round(n * p_ref)
    assert power(correct, d / p_ref, 5) >= 0.8 > power(correct, (d - 0.001) / p_ref, 5)


def test_detectable_drop_falls_with_more_items_and_less_power() -> None:
    for p_ref in (0.2, 0.5, 0.9):
        drops = [detectable_drop(n, p_ref, 0.05) for n in range(1, 300)]
        known = [math.inf if d is None else d for d in drops]
        assert known == sorted(known, reverse=True) and known[-1] < 0.1
    assert detectable_drop(70, 0.9, 0.05, power=0.5) < detectable_drop(70, 0.9, 0.05)  # type: ignore[operator]
    assert detectable_drop(70, 0.9, 0.01) > detectable_drop(70, 0.9, 0.05)  # type: ignore[operator]


@pytest.mark.parametrize(("p_ref", "max_drop"), [(0.9, 0.1), (0.9, 0.05), (0.2, 0.1), (0.5, 0.2)])
def test_items_needed_is_the_fewest(p_ref: float, max_drop: float) -> None:
    n = items_needed(p_ref, 0.05, max_drop)
    assert n is not None
    assert detectable_drop(n, p_ref, 0.05) <= max_drop  # type: ignore[operator]
    before = detectable_drop(n - 1, p_ref, 0.05)
    assert before is None or before > max_drop


def test_items_needed_past_the_limit_is_none() -> None:
    assert items_needed(0.9, 0.05, 0.001) is None
    assert items_needed(0.9, 0.05, 0.1, limit=30) is None
    assert items_needed(0.9, 0.05, 0.1, limit=items_needed(0.9, 0.05, 0.1) or 0) is not None


def test_the_shipped_smollm2_situation_is_not_judged() -> None:
    verdict = judge_accuracy(answers(10, 1), answers(10, 2), alpha=0.05, max_drop=0.1)
    m = verdict.measures
    assert verdict.ok and m["judged"] is False and m["detectable_drop"] is None
    assert m["judgement"].startswith("not judged: no power (n=10, reference accuracy 0.2, D=none")
    assert "holds" not in m["judgement"]


def test_a_small_healthy_set_is_not_judged_either() -> None:
    verdict = judge_accuracy(answers(10, 9), answers(10, 9), alpha=0.05, max_drop=0.1)
    assert verdict.measures["judgement"] == (
        "not judged: no power (n=10, reference accuracy 0.9, smallest detectable drop D=0.571 > "
        "max 0.1 at gain rate 0)"
    )
    assert verdict.measures["judged"] is False


def test_a_large_healthy_set_has_the_power_and_finds_no_drop() -> None:
    verdict = judge_accuracy(answers(70, 63), answers(70, 63), alpha=0.05, max_drop=0.1)
    m = verdict.measures
    assert verdict.ok and m["judged"] is True and m["detectable_drop"] <= 0.1
    assert m["judgement"] == "no drop detected (D=0.094 at 80 % power, gain rate 0)"
    assert (m["paired_items"], m["lost"], m["gained"], m["p_drop"]) == (70, 0, 0, 1.0)


def test_a_true_collapse_is_dropped() -> None:
    verdict = judge_accuracy(answers(70, 40), answers(70, 63), alpha=0.05, max_drop=0.1)
    m = verdict.measures
    assert not verdict.ok and m["judgement"] == "dropped" and m["judged"] is True
    assert (m["lost"], m["gained"], m["reference_accuracy"]) == (23, 0, 0.9)
    assert "23 items only the reference answered, 0 only this serve" in verdict.reason


def test_no_reference_claims_no_drop() -> None:
    verdict = judge_accuracy(answers(70, 63), None, alpha=0.05, max_drop=0.1)
    m = verdict.measures
    assert verdict.ok and m["judged"] is False
    assert m["judgement"] == "no reference: no drop claimed" and "p_drop" not in m


def test_cut_items_are_neither_right_nor_wrong() -> None:
    own: dict[str, bool | None] = {**answers(8, 6), "c1": None, "c2": None}
    ref: dict[str, bool | None] = {**answers(8, 8), "c1": True, "c2": False, "i007": None}
    m = judge_accuracy(own, ref, alpha=0.05, max_drop=0.1).measures
    assert (m["items"], m["cut"], m["correct"], m["accuracy"]) == (8, 2, 6, 0.75)
    assert (round(m["wilson_low"], 3), round(m["wilson_high"], 3)) == tuple(
        round(x, 3) for x in wilson(6, 8)
    )
    # i007 is cut on the reference's side, c1 and c2 on this serve's: seven items paired
    assert (m["paired_items"], m["lost"], m["gained"], m["reference_accuracy"]) == (7, 1, 0, 1.0)


def test_nothing_scored_is_no_accuracy_and_no_power() -> None:
    m = judge_accuracy({"c": None}, {"c": True}, alpha=0.05, max_drop=0.1).measures
    assert (m["items"], m["cut"], m["accuracy"], m["paired_items"]) == (0, 1, None, 0)
    assert m["reference_accuracy"] is None and m["judged"] is False
    assert m["judgement"].startswith("not judged: no power (n=0, reference accuracy none")


def test_measures_are_json_and_rounded() -> None:
    own = {f"i{k}": k % 3 != 0 for k in range(70)}
    m = judge_accuracy(own, answers(70, 63), alpha=0.05, max_drop=0.1).measures
    assert json.loads(json.dumps(m)) == m
    floats = [v for v in m.values() if isinstance(v, float)]
    assert floats and all(v == round(v, 6) for v in floats)


def run_until_settled(
    own: dict[str, bool | None], ref: dict[str, bool | None]
) -> tuple[int, str | None]:
    """Ask the items in order; the number asked when ``settled`` first says stop, and why."""
    ids = list(own)
    for asked in range(len(ids) + 1):
        reason = settled(
            {i: own[i] for i in ids[:asked]}, ref, remaining=len(ids) - asked, alpha=0.05
        )
        if reason:
            return asked, reason
    raise AssertionError("settled never said stop, not even with nothing left")


def test_an_identical_healthy_run_stops_once_it_cannot_become_significant() -> None:
    ref = answers(70, 63)
    asked, reason = run_until_settled(dict(ref), ref)
    assert asked == 66  # 4 left: even all lost, p = 2^-4 >= 0.05
    assert reason is not None and reason.startswith("no drop can be found with 4 items left")
    assert settled(dict(list(ref.items())[:65]), ref, remaining=5, alpha=0.05) is None
    early = judge_accuracy(
        dict(list(ref.items())[:asked]), ref, alpha=0.05, max_drop=0.1, planned=70
    )
    assert early.measures["judgement"] == "no drop detected (D=0.094 at 80 % power, gain rate 0)"


def test_a_collapse_stops_once_it_must_be_significant() -> None:
    ids = list(answers(70, 0))
    random.Random(7).shuffle(ids)
    ref: dict[str, bool | None] = {i: k < 63 for k, i in enumerate(ids)}
    own: dict[str, bool | None] = {i: k < 40 for k, i in enumerate(ids)}
    order = sorted(own)  # lost items spread through the run
    asked, reason = run_until_settled({i: own[i] for i in order}, ref)
    assert asked < 70 and reason is not None and reason.startswith("dropped whatever the")
    partial = {i: own[i] for i in order[:asked]}
    lost = sum(bool(ref[i]) and not partial[i] for i in partial)
    assert mcnemar_drop_p(lost, 70 - asked) < 0.05  # every remaining item gained: still a drop
    early = judge_accuracy(partial, ref, alpha=0.05, max_drop=0.1, planned=70)
    full = judge_accuracy(own, ref, alpha=0.05, max_drop=0.1)
    assert early.measures["judgement"] == full.measures["judgement"] == "dropped"


def test_settled_is_exact_at_the_boundary() -> None:
    # 4 lost, nothing gained, one item left: all lost gives p = 2^-5 < 0.05, so not settled
    own, ref = answers(4, 0), answers(4, 4)
    assert settled(own, ref, remaining=1, alpha=0.05) is None
    assert settled(own, ref, remaining=0, alpha=0.05) is not None  # p = 2^-4: nothing can change
    assert settled(answers(5, 0), answers(5, 5), remaining=0, alpha=0.05) is not None
    with pytest.raises(ValueError, match="remaining"):
        settled(own, ref, remaining=-1, alpha=0.05)


@pytest.mark.parametrize(("gain", "expected"), [(0.0, 0.84), (0.2, 0.64), (0.4, 0.53), (0.6, 0.45)])
def test_two_way_churn_costs_power_as_issue_40_tabled(gain: float, expected: float) -> None:
    """70 items, a reference at 90 %, a true drop of 0.10: the power falls as the serve gains
    back a share of the reference's wrong items (issue 40's table)."""
    assert round(drop_power(70, 0.9, 0.1, 0.05, gain), 2) == expected


def test_churn_raises_the_detectable_drop_and_the_items_needed() -> None:
    assert [detectable_drop(70, 0.9, 0.05, gain=g) for g in (0.0, 0.2)] == [0.094, 0.124]
    assert [items_needed(0.9, 0.05, 0.1, gain=g) for g in (0.0, 0.2)] == [67, 91]
    assert all(lost_needed(g, 0.05) >= lost_needed(g - 1, 0.05) for g in range(1, 40))
    assert (
        mcnemar_drop_p(lost_needed(3, 0.05), 3)
        < 0.05
        <= mcnemar_drop_p(lost_needed(3, 0.05) - 1, 3)
    )


def test_the_pairs_own_gain_share_blinds_the_test_when_larger_than_the_prior() -> None:
    """70 items, 63 right on the reference; the serve gained 4 of its 7 wrong and lost 4:
    judged at gain 4/7, the test cannot see 0.1 and says so."""
    ref = answers(70, 63)
    own = dict(ref)
    right = [i for i, v in ref.items() if v][:4]
    wrong = [i for i, v in ref.items() if not v][:4]
    own |= {i: False for i in right} | {i: True for i in wrong}
    m = judge_accuracy(own, ref, alpha=0.05, max_drop=0.1, gain_rate=0.2).measures
    assert m["gain_rate"] == round(4 / 7, 6) and m["judged"] is False
    assert m["judgement"].startswith("not judged: no power (n=70")
