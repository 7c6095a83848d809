"""The accuracy check (tp2qual.checks.accuracy): the shipped items are the generator's, the
scoring reads the last number, the interval and the paired drop test give known values, and no
item asked means no accuracy claim (never a crash)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tp2qual
from tp2qual.candidate import GATE_DEFAULTS
from tp2qual.checks.accuracy import generate, judge_accuracy, mcnemar_drop_p, score, wilson
from tp2qual.checks.agreement import accuracy_claims, rederive

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
    verdict = judge_accuracy(own, ref, alpha=0.05)
    assert not verdict.ok and verdict.measures["p_drop"] == 1 / 64
    assert "exact McNemar p = 0.0156 < 0.05" in verdict.reason
    assert judge_accuracy(own, None, alpha=0.05).ok  # no reference: interval only


def test_no_item_asked_claims_nothing() -> None:
    assert accuracy_claims([], SETTINGS, with_reference=True) == {}
    assert "accuracy" not in rederive([{"kind": "transcript", "id": "a"}], SETTINGS)


def test_accuracy_claims_pair_only_the_same_items() -> None:
    own = [
        {"kind": "accuracy", "id": f"i{k}", "items_sha256": "s", "correct": k > 0} for k in range(4)
    ]
    ref = [{**r, "kind": "reference_accuracy", "correct": True} for r in own]
    other = [{**r, "items_sha256": "t", "correct": False} for r in ref]  # other bytes: unpaired
    claims = accuracy_claims([*own, *ref, *other], SETTINGS, with_reference=True)
    assert claims["accuracy"] == 0.75 and claims["reference_accuracy"] == 1.0
    assert claims["accuracy_p_drop"] == 0.5 and claims["accuracy_holds"] is True
