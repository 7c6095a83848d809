"""verify's early stop for gate 07's accuracy items: recomputed from the re-scored items by
``checks.accuracy.settled``, as the gate's loop stops (pure, no run folder)."""

from __future__ import annotations

from typing import Any

from tp2qual.checks.agreement import ACCURACY, REFERENCE_ACCURACY, STOPPED
from tp2qual.evidence.rederive.accuracy_items import check_stop, expected_stop
from tp2qual.evidence.rederive.common import Rederived

SETTINGS = {"accuracy_items": 70, "accuracy_alpha": 0.05}


def _lines(asked: int, stop: dict[str, Any] | None) -> list[dict[str, Any]]:
    """A reference right on 63 of 70 items, and a serve identical to it on the first
    ``asked``."""
    ids = [f"arith-{i:03d}" for i in range(70)]
    ref = [{"kind": REFERENCE_ACCURACY, "id": i, "items_sha256": "d", "correct": n < 63}
           for n, i in enumerate(ids)]  # fmt: skip
    own = [{**line, "kind": ACCURACY} for line in ref[:asked]]
    return [*ref, *own, *([{"kind": STOPPED, **stop}] if stop else [])]


def _mismatches(lines: list[dict[str, Any]]) -> list[str]:
    out = Rederived()
    check_stop(lines, SETTINGS, out)
    return [m.line() if hasattr(m, "line") else str(m) for m in out.mismatches]


def test_an_identical_serve_stops_after_66_and_verify_agrees() -> None:
    want = expected_stop(_lines(66, None), 70, 0.05)
    assert want is not None and want["after"] == 66
    assert want["why"].startswith("no drop can be found with 4 items left")
    assert _mismatches(_lines(66, want)) == []


def test_a_stop_the_rule_does_not_give_and_asking_past_it_are_mismatches() -> None:
    want = expected_stop(_lines(66, None), 70, 0.05)
    assert want is not None
    assert _mismatches(_lines(60, {"after": 60, "why": "made up"}))  # stopped too soon
    assert _mismatches(_lines(70, None))  # asked past the stop
    assert _mismatches(_lines(66, {**want, "after": 65}))


def test_a_gate_cut_short_before_the_stop_is_no_stop_mismatch() -> None:
    """Fewer asked than the stop point and no stop line: the gate was cut (its own FAIL says
    why), not a stop that verify could recompute."""
    assert _mismatches(_lines(30, None)) == []


def test_a_stop_before_the_first_item_is_recomputed() -> None:
    """Two items planned can never show a drop at 0.05 (p >= 0.25 with both lost): the gate
    stops after 0 and writes no item, so the set is the reference's (a real run had verify
    expect no stop there)."""
    lines = _lines(0, None)
    want = expected_stop(lines, 2, 0.05)
    assert want is not None and want["after"] == 0
    out = Rederived()
    check_stop([*lines, {"kind": STOPPED, **want}], {**SETTINGS, "accuracy_items": 2}, out)
    assert out.mismatches == []
