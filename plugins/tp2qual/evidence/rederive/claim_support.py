"""Whether a claim's value is one a passed gate can have, by the claim's name.

verify holds each claim a passed gate made to these rules: a flag must be true, a count above
zero, a fill or a status within the gate's bound, and a throughput figure with a written floor
must meet it in the floor's direction (``perf.floors.claim_meets``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tp2qual.checks.overlength import PASSING
from tp2qual.perf import floors


def _true(value: Any, _settings: Mapping[str, Any]) -> bool:
    return value is True


def _some(value: Any, _settings: Mapping[str, Any]) -> bool:
    return isinstance(value, int) and value > 0


# What a claim's value must be for its gate to have passed, by claim name (settings: the gate's).
SUPPORTS_PASS: dict[str, Callable[[Any, Mapping[str, Any]], bool]] = {
    "engine_accepts_launch": _true,
    "known_answers_correct": _true,
    "answers_identical_over_repeats": _true,
    "long_outputs_clean": _true,
    "long_outputs": _some,
    "tool_calls_ok": _true,
    "tool_calls_checked": _some,
    "tool_calls_power_ok": _true,  # every mode's N calls passed (checks.tool_power)
    # The fill wanted depends on the bound (checks.needle.needle_plan): judged by the row's
    # fill_reached, which verify re-derives; a run from before it still has its fill claim.
    "needle_prompt_fill": lambda v, _s: isinstance(v, int | float) and 0 < v <= 1,
    "needle_fill_reached": _true,
    "over_bound_status": lambda v, _s: isinstance(v, int) and 400 <= v < 500,
    "over_bound_stream": lambda v, _s: v in PASSING,
    "samples": lambda v, s: isinstance(v, int) and v >= s["samples"],
    "protocol_requests": lambda v, s: isinstance(v, int) and v >= s["protocol"]["requests"],
}


def supports_pass(name: str, value: Any, settings: Mapping[str, Any]) -> bool | None:
    """Whether a claim's value is one a passed gate can have; None when no rule applies.
    A throughput figure with a written floor must meet it in the floor's direction."""
    rule = SUPPORTS_PASS.get(name)
    if rule is not None:
        try:
            return rule(value, settings)
        except (KeyError, TypeError):
            return False
    return floors.claim_meets(name, value, settings)
