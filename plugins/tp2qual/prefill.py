"""The prefill rates on record, and the rate a request's deadline assumes for its prompt.

A deadline that counts a request's decode but not its prompt gives a 196k-token prompt the
same minute as a 16-token one. The only prefill times dated on the campaign's hardware are the
user's two long-prompt records below (issue 35 quotes them); the suite assumes the slowest of
them, slowed by ``PREFILL_MARGIN``. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrefillRecord:
    """One dated time to the first token of a long prompt, on one serve."""

    serve: str
    prompt_tokens: int
    ttft_s: float
    source: str

    @property
    def tok_s(self) -> float:
        return self.prompt_tokens / self.ttft_s


RECORDS = (
    PrefillRecord(
        "Qwen3.5 122B A10B NVFP4, TP1 on one RTX PRO 6000 (vLLM)",
        231_000,
        68.9,
        "the user's record of 2026-07-29 (fakoli/anvil-serving docs/findings/"
        "2026-07-29-agents-a1-qwen-262k-head-to-head.md), a 231k-token prompt as issue 35 "
        "quotes it",
    ),
    PrefillRecord(
        "Laguna S 2.1 NVFP4, TP2 on two RTX PRO 6000 (vLLM 0.25.1)",
        231_000,
        31.9,
        "the user's record of 2026-08-01 (the TP2 campaign), a 231k-token prompt as issue 35 "
        "quotes it",
    ),
)

# Why 2: the records are one request on an idle serve; a deadline must hold on a serve that is
# slower than the slowest record (another model, a shorter bound's other kernels, a machine
# busy with other work) without calling it hung. Three of the five models (DeepSeek, Inkling,
# Nemotron) have no prefill record at all; the flat allowance (budget.DEFAULT_PREFILL_S) stays
# on top for them.
PREFILL_MARGIN = 2.0


def slowest() -> PrefillRecord:
    return min(RECORDS, key=lambda r: r.tok_s)


def assumed_tok_s() -> float:
    """The prefill rate a deadline assumes: the slowest on record over the margin."""
    return slowest().tok_s / PREFILL_MARGIN


def basis() -> str:
    """Where the assumed rate comes from, in one line."""
    low = slowest()
    return (
        f"{assumed_tok_s():.0f} tok/s = the slowest prefill on record, {low.prompt_tokens:,} "
        f"tokens in {low.ttft_s:g} s ({low.tok_s:.0f} tok/s, {low.serve}), over a margin of "
        f"{PREFILL_MARGIN:g}"
    )
