"""What a candidate's gates are *expected* to decode, and the long prompts they prefill.

The upper bound (perf/estimate.py ``GATE_LOADS``) counts every request at its whole budget. The
expected figure counts a request at the tokens its kind of answer took in the user's own
transcripts of this serve under the same reasoning control (``[plan] expected_tokens``: a kind,
its tokens, the raw JSON it comes from), never more than its budget. A kind with no transcript
stays at its budget, and says so; so does every kind when the candidate's ``[gates.request]
extra`` is not the one the transcripts were recorded with (``[plan] expected_with``): a thinking
lane is not expected to answer like the serve with thinking off.

The kinds: ``short_answer`` (gate 03's questions, gate 07's arithmetic items), ``tool_call``
(every gate-05 call, twin and the call after the long prompt), ``tool_result_answer`` (gate 05's
answer to the tool's result), ``needle_answer`` (gate 06). Gate 04 asks for long texts and gate
08 and gate 07's shipped prompts decode a fixed length: at their budget in both figures.

``long_prompts`` names each prompt that fills a share of the bound (gate 05's long call, gate
06's needle, gate 07's near-bound prompt, decoded then reread): perf/prefill.py times them.
Each follows its gate's own sizing rule (``long_aim``, ``ladder_plan``, ``near_bound_plan``).
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tp2qual.checks.agreement.near_bound import near_bound_plan
from tp2qual.checks.tool_modes import long_aim, long_base
from tp2qual.perf.ladder import NEEDLE_TAG, ladder_plan

# Set in gate 06's settings by ``estimate``: the rows ``ladder_plan`` gives the serve's bound.
LADDER_ROWS = "ladder_rows"

KINDS = ("short_answer", "tool_call", "tool_result_answer", "needle_answer")


@dataclass(frozen=True)
class Expectation:
    tokens: int
    source: str


@dataclass(frozen=True)
class Expectations:
    """The candidate's expected answer sizes, or why none apply (every request at its budget)."""

    kinds: Mapping[str, Expectation] = field(default_factory=dict)
    not_applied: str = ""  # why the transcripts do not speak for this candidate; "" when they do

    def tokens(self, kind: str, budget: int) -> int:
        found = None if self.not_applied else self.kinds.get(kind)
        return budget if found is None else min(budget, found.tokens)

    def lines(self) -> list[str]:
        if self.not_applied:
            return [f"every answer at its budget: {self.not_applied}"]
        said = [f"{k} {e.tokens} tokens ({e.source})" for k, e in self.kinds.items()]
        missing = [k for k in KINDS if k not in self.kinds]
        at_budget = [f"{', '.join(missing)}: at the budget, no transcript"] if missing else []
        return [*said, *at_budget]


def expectations_of(spec: Mapping[str, Any]) -> Expectations:
    """``[plan]`` of a candidate's spec, held against its ``[gates.request] extra``."""
    plan = spec.get("plan") or {}
    table = plan.get("expected_tokens") or {}
    if not table:
        return Expectations(not_applied="no transcript named ([plan] expected_tokens)")
    extra = ((spec.get("gates") or {}).get("request") or {}).get("extra") or {}
    recorded = plan.get("expected_with") or {}
    if dict(extra) != dict(recorded):
        return Expectations(
            not_applied=f"the transcripts were recorded with {recorded}, this candidate asks "
            f"{extra} ([gates.request] extra)"
        )
    kinds = {k: Expectation(int(v["tokens"]), str(v["source"])) for k, v in table.items()}
    return Expectations(kinds)


@dataclass(frozen=True)
class LongPrompt:
    gate: str
    what: str
    tokens: int
    passes: int  # how many times the whole prompt is prefilled


def long_prompts(gates: Mapping[str, Mapping[str, Any]], max_model_len: int) -> list[LongPrompt]:
    """The long prompts of the gates given (gate name -> its settings), by each gate's rule."""
    found: list[LongPrompt] = []
    tools = gates.get("tool_calls")
    if tools and float(tools.get("long_fill") or 0) > 0 and long_base(tools.get("modes") or ()):
        aim = long_aim(max_model_len, float(tools["long_fill"]), int(tools["max_tokens"]))[1]
        found.append(LongPrompt("tool_calls", "the call after a long prompt", aim, 1))
    capacity = gates.get("capacity")
    if capacity and capacity.get("needle_max_tokens"):
        # the over-bound prompt is refused before any prefill (gate 06 fails a serve that doesn't)
        for rung in ladder_plan(max_model_len, capacity).rungs:
            what = "the needle" if rung.tag == NEEDLE_TAG else f"the ladder's row {rung.tag}"
            found.append(LongPrompt("capacity", what, rung.prompt_tokens, 1))
    agreement = gates.get("agreement")
    if agreement and agreement.get("near_bound_fill"):
        near = near_bound_plan(max_model_len, agreement).prompt_tokens
        found.append(LongPrompt("agreement", "the near-bound prompt, decoded and reread", near, 2))
    return found


Load = tuple[int, int]  # (requests, tokens)
Expect = Callable[[Mapping[str, Any], Load, Expectations], Load]


def _deterministic(s: Mapping[str, Any], upper: Load, e: Expectations) -> Load:
    return upper[0], upper[0] * e.tokens("short_answer", int(s.get("max_tokens") or 0))


def _tool_calls(s: Mapping[str, Any], upper: Load, e: Expectations) -> Load:
    """The answers to the tool's result at their kind, every other decoding request a call;
    the long prompt's two calibrations decode one token each."""
    budget = int(s.get("max_tokens") or 0)
    answers = int(s.get("repeats") or 1) if "result" in (s.get("modes") or ()) else 0
    calibrations = 2 if float(s.get("long_fill") or 0) > 0 else 0
    calls = upper[0] - answers - calibrations
    tokens = calls * e.tokens("tool_call", budget) + calibrations
    return upper[0], tokens + answers * e.tokens("tool_result_answer", budget)


def _capacity(s: Mapping[str, Any], upper: Load, e: Expectations) -> Load:
    """Every ladder row's answer (the needle's among them) at a needle answer's size."""
    budget, rows = int(s.get("needle_max_tokens") or 0), int(s.get(LADDER_ROWS) or 1)
    return upper[0], upper[1] - rows * (budget - e.tokens("needle_answer", budget))


def items_load(items: int, budget: int, e: Expectations) -> Load:
    """Gate 07's arithmetic items asked (``tp2qual.accuracy_asked``: none where no drop can be
    judged from them), each at a short answer (all of them: asking may stop earlier); the rest
    of gate 07 decodes a fixed length, at its budget."""
    return items, items * e.tokens("short_answer", budget)


EXPECTED: dict[str, Expect] = {
    "deterministic": _deterministic,
    "tool_calls": _tool_calls,
    "capacity": _capacity,
}


def expected_load(gate: str, settings: Mapping[str, Any], upper: Load, e: Expectations) -> Load:
    """The gate's (requests, tokens) as expected; a gate with no expectation: its upper bound."""
    how = EXPECTED.get(gate)
    return upper if how is None else how(settings, upper, e)
