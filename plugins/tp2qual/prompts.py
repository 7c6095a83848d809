"""Prompts sized in tokens: filler text calibrated against the server's own token counts.

Capacity and throughput need prompts of a known token length; only the server's tokenizer knows
it, so we measure ``usage.prompt_tokens`` for two filler sizes and interpolate.
"""

from __future__ import annotations

from dataclasses import dataclass

_FILLER = (
    "Note {i}: the harbour log records calm water, a light westerly wind and clear skies, "
    "and the ferry left on time."
)


def filler(sentences: int, start: int = 1) -> str:
    return " ".join(_FILLER.format(i=i) for i in range(start, start + sentences))


@dataclass(frozen=True)
class Calibration:
    """prompt_tokens ≈ overhead + per_sentence * sentences."""

    overhead: float
    per_sentence: float

    def sentences_for(self, tokens: int) -> int:
        return max(1, int((tokens - self.overhead) / self.per_sentence))

    def tokens_for(self, sentences: int) -> int:
        return round(self.overhead + self.per_sentence * sentences)


def calibrate(small: tuple[int, int], large: tuple[int, int]) -> Calibration:
    """Two (sentences, prompt_tokens) observations → a line through them."""
    (s1, t1), (s2, t2) = small, large
    per = (t2 - t1) / (s2 - s1)
    return Calibration(overhead=t1 - per * s1, per_sentence=per)
