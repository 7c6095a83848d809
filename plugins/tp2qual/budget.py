"""How long one request may take: from what it asks for and the candidate's decode floor.

A fixed timeout is wrong both ways: too short for a correct but slow serve (2048 tokens at
11 tok/s is three minutes), too long to notice a stuck one. The budget is the prefill allowance
plus the time the requested tokens take at the floor, with a margin; a gate may fix its own.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FLOOR_TOK_S = 2.0
DEFAULT_PREFILL_S = 60.0
MARGIN = 1.25


@dataclass(frozen=True)
class TimeBudget:
    floor_tok_s: float = DEFAULT_FLOOR_TOK_S
    prefill_s: float = DEFAULT_PREFILL_S
    fixed_s: float | None = None  # the gate's own request_timeout_s

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
            f"≥ {self.floor_tok_s:g} tok/s (prefill budget {self.prefill_s:g} s, margin {MARGIN})"
        )
