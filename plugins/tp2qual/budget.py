"""How long one request may take: from what it asks for and the candidate's decode floor.

A fixed timeout is wrong both ways: too short for a correct but slow serve (2048 tokens at
11 tok/s is three minutes), too long to notice a stuck one. The budget is the prefill allowance
plus the time the requested tokens take at the floor that applies to the candidate (the one
gate 08 judges: written, or derived from its reference's measured rate, its baseline or its
roofline, perf/floors.py), with a margin; a gate may fix its own. A hung 2048-token request of a
serve with a 39 tok/s floor is reported after 60 + 1.25 x 2048 / 39 = 126 s, about three times
the 31 s it takes at the reference's 65 tok/s; a serve slower than its floor but within the
margin still answers and fails gate 08, the gate that judges speed.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FLOOR_TOK_S = 2.0
DEFAULT_PREFILL_S = 60.0
MARGIN = 1.25
NO_FLOOR = f"no decode floor applies: {DEFAULT_FLOOR_TOK_S:g} tok/s assumed"


@dataclass(frozen=True)
class TimeBudget:
    floor_tok_s: float = DEFAULT_FLOOR_TOK_S
    prefill_s: float = DEFAULT_PREFILL_S
    fixed_s: float | None = None  # the gate's own request_timeout_s
    floor_source: str = NO_FLOOR  # where floor_tok_s comes from, said in a timeout report

    def seconds_for(self, max_tokens: int | None) -> float:
        if self.fixed_s is not None:
            return self.fixed_s
        return self.prefill_s + MARGIN * max(int(max_tokens or 1), 1) / self.floor_tok_s

    def explain(self, max_tokens: int | None) -> str:
        """The timeout's meaning, in the words a timeout report uses."""
        seconds = self.seconds_for(max_tokens)
        if self.fixed_s is not None:
            return f"no response within {seconds:.0f} s (the gate's request_timeout_s)"
        return (
            f"no response within {seconds:.0f} s for a request of {max_tokens} tokens at "
            f"≥ {self.floor_tok_s:.4g} tok/s (prefill budget {self.prefill_s:g} s, margin "
            f"{MARGIN}; the floor: {self.floor_source})"
        )
