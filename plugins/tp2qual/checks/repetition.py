"""Degenerate-output detection for long generations.

A serving bug (bad KV cache, broken sampler, wrong rope scaling) rarely crashes: it makes the
model loop, stutter one token, or pad with whitespace. These measures catch that shape of
output without a reference answer, so they work on free-form essays:

* ``compression_ratio`` - zlib ratio of the UTF-8 bytes, Whisper's hallucination rule.
* ``seq_rep`` - share of repeated word n-grams (seq-rep-n, Welleck et al. 2019).
* ``tail_loop_*`` - the text ends in one block repeated over and over (Holtzman et al. 2019).
* ``max_char_run`` / ``max_space_run`` - one character emitted many times (``+++++``, ``\\n\\n``).
* ``max_token_run`` - one whitespace-delimited word emitted many times in a row.

Defaults are chosen so that bland but coherent small-model prose passes and loops fail; see
``Thresholds`` for the reasoning behind each number.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from tp2qual.checks.answers import check_finish, output_text, split_reasoning
from tp2qual.checks.verdict import Verdict


@dataclass(frozen=True)
class Thresholds:
    """Limits for :func:`check`; a measure strictly above its limit fails.

    * ``max_compression_ratio`` 4.0: Whisper uses 2.4 on ~30 s segments (a few hundred chars);
      over ~500 tokens zlib finds more matches, so coherent English sits at 1.8-2.2 and bland
      greedy small-model essays at 2.5-3.0, while any real loop goes well past 4.
    * ``seq_rep_n`` 4 and ``max_seq_rep`` 0.5: human text scores ~0.01, greedy GPT-2 ~0.44
      (Welleck et al.); above 0.5 more 4-grams are repeats than fresh, which is a loop, not style.
    * ``loop_max_period`` 1000, ``loop_min_repeats`` 3, ``max_tail_loop_chars`` 100: a tail
      that repeats a block of up to 1000 chars (small models loop on whole sentences and
      paragraphs) at least 3 times over more than 100 chars is a loop; ``...``, ``ha ha ha`` or
      a short table border stay under 100 chars.
    * ``max_char_run`` 80 and ``max_space_run`` 80: ruled lines and indentation stop at a line
      width; hundreds of ``+`` or newlines are one token sampled every step.
    * ``max_token_run`` 16: prose repeats a word two or three times ("very, very"); sixteen
      identical words in a row is a stuck decoder.
    """

    max_compression_ratio: float = 4.0
    seq_rep_n: int = 4
    max_seq_rep: float = 0.5
    loop_max_period: int = 1000
    loop_min_repeats: int = 3
    max_tail_loop_chars: int = 100
    max_char_run: int = 80
    max_space_run: int = 80
    max_token_run: int = 16

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> Thresholds:
        """Build from config, refusing unknown keys so a typo cannot silently keep a default."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown repetition threshold(s) {unknown}; known: {sorted(known)}")
        return cls(**dict(values))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULT = Thresholds()

# measure name -> threshold attribute that bounds it
_LIMITS: dict[str, str] = {
    "compression_ratio": "max_compression_ratio",
    "seq_rep": "max_seq_rep",
    "tail_loop_chars": "max_tail_loop_chars",
    "max_char_run": "max_char_run",
    "max_space_run": "max_space_run",
    "max_token_run": "max_token_run",
}


def compression_ratio(text: str) -> float:
    """Raw bytes over zlib bytes: high when the text says the same thing again and again."""
    raw = text.encode("utf-8")
    if not raw:
        return 0.0
    return len(raw) / len(zlib.compress(raw))


def seq_rep(text: str, n: int = 4) -> float:
    """1 - unique/total word n-grams; 0 when the text has fewer than n words."""
    words = text.split()
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    if not grams:
        return 0.0
    return 1.0 - len(set(grams)) / len(grams)


def _repeats_back(text: str, period: int, length: int) -> bool:
    """True when the last ``length`` chars equal the ``length`` chars one period earlier."""
    end = len(text)
    return text[end - length :] == text[end - length - period : end - period]


def _periodic_suffix(text: str, period: int, at_least: int) -> int:
    """Longest suffix with ``text[i] == text[i - period]``, or 0 if shorter than ``at_least``.

    The property holds for every shorter suffix once it holds for a long one, so after the
    cheap ``at_least`` probe (which rejects almost every period of normal text) a binary
    search finds the length.
    """
    lo, hi = at_least, len(text) - period
    if lo > hi or not _repeats_back(text, period, lo):
        return 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if _repeats_back(text, period, mid) else (lo, mid - 1)
    return lo


def tail_loop(text: str, max_period: int = 1000, min_repeats: int = 3) -> tuple[int, float, int]:
    """Find the block the text ends by repeating: ``(period, repeats, chars covered)``.

    Among periods 1..max_period repeated at least ``min_repeats`` times, the one covering most
    characters wins (shortest on ties). A partial last block, as left by a ``max_tokens`` cut,
    still counts. ``(0, 0.0, 0)`` when the tail does not loop.
    """
    best = (0, 0.0, 0)
    for period in range(1, min(max_period, len(text) // min_repeats) + 1):
        covered = _periodic_suffix(text, period, (min_repeats - 1) * period) + period
        if covered >= min_repeats * period and covered > best[2]:
            best = (period, round(covered / period, 2), covered)
    return best


def _runs(text: str) -> tuple[int, int]:
    """Longest run of one non-whitespace character and of one whitespace character."""
    longest = {False: 0, True: 0}
    run, prev = 0, ""
    for ch in text:
        run = run + 1 if ch == prev else 1
        prev = ch
        kind = ch.isspace()
        longest[kind] = max(longest[kind], run)
    return longest[False], longest[True]


def max_token_run(text: str) -> int:
    """Longest run of one identical whitespace-delimited token (``ok ok ok ...``)."""
    longest, run, prev = 0, 0, None
    for word in text.split():
        run = run + 1 if word == prev else 1
        prev = word
        longest = max(longest, run)
    return longest


def measure(text: str, thresholds: Thresholds = DEFAULT) -> dict[str, float | int]:
    """All repetition measures of ``text``; ``thresholds`` only shapes n and the loop search."""
    period, repeats, covered = tail_loop(
        text, thresholds.loop_max_period, thresholds.loop_min_repeats
    )
    char_run, space_run = _runs(text)
    return {
        "chars": len(text),
        "words": len(text.split()),
        "compression_ratio": round(compression_ratio(text), 3),
        "seq_rep": round(seq_rep(text, thresholds.seq_rep_n), 4),
        "tail_loop_period": period,
        "tail_loop_repeats": repeats,
        "tail_loop_chars": covered,
        "max_char_run": char_run,
        "max_space_run": space_run,
        "max_token_run": max_token_run(text),
    }


def check(text: str, thresholds: Thresholds = DEFAULT) -> Verdict:
    """Fail empty or degenerate text, naming every measure over its limit."""
    if not text.strip():
        return Verdict.failed("empty output", chars=len(text))
    measures = measure(text, thresholds)
    over = [
        f"{name}={measures[name]} > {getattr(thresholds, limit)}"
        for name, limit in _LIMITS.items()
        if measures[name] > getattr(thresholds, limit)
    ]
    if over:
        return Verdict.failed("degenerate output: " + ", ".join(over), **measures)
    return Verdict.passed(**measures)


def judge_long_output(
    message: Mapping[str, Any],
    finish_reason: str | None,
    thresholds: Thresholds,
    allowed: Sequence[str] | None,
) -> Verdict:
    """Gate 04's decision on one long output, used by the gate and by verify: its ending
    (``answers.check_finish``: a long output may end at its cap where ``allowed`` says so, never
    without visible text), then its loops over reasoning and answer alike. ``allowed`` None is a
    run recorded before endings were judged: loops only, as it was decided."""
    answer, reasoning = split_reasoning(dict(message))
    if allowed is not None:
        ending = check_finish(answer, reasoning, finish_reason, allowed)
        if not ending.ok:
            return ending
    return check(output_text(dict(message)), thresholds)
