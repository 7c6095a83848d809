"""How long one request may take: from what it asks for and the candidate's decode floor.

A fixed timeout is wrong both ways: too short for a correct but slow serve (2048 tokens at
11 tok/s is three minutes), too long to notice a stuck one. The budget is the prefill allowance,
plus the request's prompt at the slowest prefill rate on record with its margin
(``prefill``: a 196,608-token prompt is about two minutes, where a flat minute FAILed it,
issue 35), plus the time the requested tokens take at the floor that applies to the candidate
(the one gate 08 judges: written, or derived from its reference's measured rate, its baseline or
its roofline, perf/floors.py), with a margin; a gate may fix its own. A hung 2048-token request of a
serve with a 39 tok/s floor is reported after 60 + 1.25 x 2048 / 39 = 126 s, about three times
the 31 s it takes at the reference's 65 tok/s; a serve slower than its floor but within the
margin still answers and fails gate 08, the gate that judges speed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tp2qual import prefill

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
    # The prompt's own prefill: the slowest rate on record over its margin (prefill.py).
    prefill_tok_s: float = field(default_factory=prefill.assumed_tok_s)

    def seconds_for(self, max_tokens: int | None, prompt_tokens: int = 0) -> float:
        if self.fixed_s is not None:
            return self.fixed_s
        reply = MARGIN * max(int(max_tokens or 1), 1) / self.floor_tok_s
        return self.prefill_s + max(prompt_tokens, 0) / self.prefill_tok_s + reply

    def explain(self, max_tokens: int | None, prompt_tokens: int = 0) -> str:
        """The timeout's meaning, in the words a timeout report uses."""
        seconds = self.seconds_for(max_tokens, prompt_tokens)
        if self.fixed_s is not None:
            return f"no response within {seconds:.0f} s (the gate's request_timeout_s)"
        prompt = (
            f" + a {prompt_tokens}-token prompt at {self.prefill_tok_s:.0f} tok/s"
            if prompt_tokens
            else ""
        )
        return (
            f"no response within {seconds:.0f} s for a request of {max_tokens} tokens at "
            f"≥ {self.floor_tok_s:.4g} tok/s (prefill budget {self.prefill_s:g} s{prompt}, "
            f"margin {MARGIN}; the floor: {self.floor_source})"
        )
