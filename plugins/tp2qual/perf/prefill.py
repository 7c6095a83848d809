"""How long a prompt takes to reach its first output, from a dated record's prefill rows.

A record's row is one prompt size and the time its first output took at c1 (the user's
``capacity`` lanes: ``usage.prompt_tokens`` over the client-observed time to first output, so
queueing and scheduling are in it). A prefill's time grows with the prompt at most quadratically
(attention) and at least linearly (every other layer), with no negative term: t(n) = a·n + b·n²,
a, b >= 0. So, from one row (n0, t0):

- n <= n0: t(n) <= t0 · n / n0 (the upper bound scales the row down linearly);
- n >= n0: t(n) <= t0 · (n / n0)² (and up quadratically).

The *expected* time fits a and b through two rows (the pair that brackets n, else the nearest
two), clamped to a, b >= 0; from one row it is the linear share, a lower estimate that says so.
Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

# The suite's short prompts (a question, a tool call's system message and schema, gate 08's 512
# words) stay under this many tokens: a short request's first token is counted at this size.
SHORT_PROMPT_TOKENS = 1000


@dataclass(frozen=True)
class PrefillRow:
    prompt_tokens: int
    seconds: float  # to the first output (reasoning or visible), queueing included

    @property
    def rate(self) -> float:
        return self.prompt_tokens / self.seconds

    def words(self) -> str:
        return f"{self.prompt_tokens:,} tokens in {self.seconds:g} s ({self.rate:,.0f} tok/s)"


def rows_of(baseline: Mapping[str, Any] | None) -> tuple[PrefillRow, ...]:
    """A ``[baseline]``'s ``prefill`` rows, smallest prompt first (none: an empty tuple)."""
    rows = (baseline or {}).get("prefill") or []
    found = [PrefillRow(int(r["prompt_tokens"]), float(r["seconds"])) for r in rows]
    return tuple(sorted(found, key=lambda r: r.prompt_tokens))


def scaled(rows: Sequence[PrefillRow], factor: float) -> tuple[PrefillRow, ...]:
    """The rows with every time multiplied by ``factor`` (another TP size's, say)."""
    return tuple(PrefillRow(r.prompt_tokens, r.seconds * factor) for r in rows)


def upper_seconds(rows: Sequence[PrefillRow], tokens: int) -> float:
    """The most a prompt of ``tokens`` may take: linearly down from the smallest row at or above
    it, else quadratically up from the largest row."""
    above = [r for r in rows if r.prompt_tokens >= tokens]
    if above:
        return above[0].seconds * tokens / above[0].prompt_tokens
    top = rows[-1]
    return top.seconds * (tokens / top.prompt_tokens) ** 2


def expected_seconds(rows: Sequence[PrefillRow], tokens: int) -> float:
    """t(n) = a·n + b·n² through the two rows nearest ``tokens`` (a, b >= 0); one row: n / rate."""
    if len(rows) == 1:
        return tokens / rows[0].rate
    low, high = _pair(rows, tokens)
    # t/n = a + b·n is a line through the two rows' (n, t/n)
    per_low, per_high = low.seconds / low.prompt_tokens, high.seconds / high.prompt_tokens
    b = max(0.0, (per_high - per_low) / (high.prompt_tokens - low.prompt_tokens))
    a = max(0.0, per_low - b * low.prompt_tokens)
    return a * tokens + b * tokens**2


def _pair(rows: Sequence[PrefillRow], tokens: int) -> tuple[PrefillRow, PrefillRow]:
    for low, high in pairwise(rows):
        if tokens <= high.prompt_tokens:
            return low, high
    return rows[-2], rows[-1]


def basis_words(rows: Sequence[PrefillRow]) -> str:
    """The rows as ``--plan`` names them."""
    return "; ".join(r.words() for r in rows)
