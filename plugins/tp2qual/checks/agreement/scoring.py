"""Position-by-position figures between a decode and a reread of the same tokens.

Two uses, one rule:

- *self-consistency* (as SGLang's ``python/sglang/test/kl_test_utils.py``): a serve's decode
  against its own reread of prompt plus answer. Decode and prefill run different code paths
  (KV-cache writes and reads, batched prefill kernels); on a healthy serve they agree to noise.
- *teacher forcing*: the reference's decode against this serve's reread of the reference's
  prompt plus answer. Every position of the reference's answer is compared in the same context
  on both sides, so drift past the first differing token shows.

Per position: |Δ| of the token's logprob, whether both sides' top-1 agree (its complement is the
argmax flip rate, judged by a binomial test over the positions: ``flips``), and a KL estimate
over the shared top N *plus one tail bucket per side*
(``Σ p·log(p/q)`` over the tokens both lists name, and ``p_tail·log(p_tail/q_tail)`` with
``p_tail = 1 - Σ p`` over them, likewise ``q_tail``). That is the exact KL of both
distributions coarsened to those buckets, so it is never negative and never above the true KL
(data processing): a sharper or flatter serve cannot score below zero and offset others in the
mean, as the top-N-only sum did (-0.30 for logits x1.5 where the true KL is 0.89).

A reread that gives no logprob for the token (at shift 1, a token outside the previous row's
top list) counts at its list's lowest logprob: |Δ| at least that; one it gives no row for at
all is *unreadable*, counted and left out of the aligned share (which measures how the two
tokenizations meet). Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.agreement.flips import flip_p
from tp2qual.checks.agreement.rows import Row, aligned, answer_rows, reread_rows
from tp2qual.checks.verdict import Verdict


@dataclass(frozen=True)
class Bounds:
    """The tolerances of one comparison (``[gates.agreement]`` ``<prefix>_…``)."""

    max_mean_abs_delta: float
    max_p99_abs_delta: float
    min_top1_agreement: float
    max_mean_kl: float
    min_aligned_share: float
    # The argmax flips FAIL when more than a flip rate of 1 - min_top1_agreement explains at
    # this alpha (flips.py); None: the bare share, as runs recorded before flip_alpha were judged.
    flip_alpha: float | None = None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], prefix: str) -> Bounds:
        alpha = settings.get("flip_alpha")
        return cls(
            float(settings[f"{prefix}_max_mean_abs_delta"]),
            float(settings[f"{prefix}_max_p99_abs_delta"]),
            float(settings[f"{prefix}_min_top1_agreement"]),
            float(settings[f"{prefix}_max_mean_kl"]),
            float(settings["min_aligned_share"]),
            None if alpha is None else float(alpha),
        )


def _value(row: Row) -> tuple[float | None, bool]:
    """The row's logprob for its token, and whether it is only a bound (outside its list)."""
    if row["logprob"] is not None:
        return row["logprob"], False
    return (row["top"][-1][1], True) if row["top"] else (None, True)


# A tail below this is rounding in the engine's logprobs (top lists that sum past 1), not mass.
_TAIL_FLOOR = 1e-9


def _kl(decoded: Row, reread: Row) -> float | None:
    """KL(decode || reread) over the shared top N and one tail bucket each side (module doc)."""
    theirs = {pair[0]: pair[1] for pair in reread["top"]}
    shared = [(lp, theirs[t]) for t, lp in decoded["top"] if t in theirs]
    if not shared:
        return None
    head = sum(math.exp(a) * (a - b) for a, b in shared)
    p_tail = 1.0 - sum(math.exp(a) for a, _ in shared)
    q_tail = max(_TAIL_FLOOR, 1.0 - sum(math.exp(b) for _, b in shared))
    tail = p_tail * math.log(p_tail / q_tail) if p_tail > _TAIL_FLOOR else 0.0
    # Each term's sum is >= 0 in exact arithmetic; float rounding must not make it negative.
    return max(0.0, head + tail)


def quantile(values: Sequence[float], q: float) -> float:
    """The nearest-rank quantile (the value at rank ceil(q·n))."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(q * len(ranked)) - 1)] if ranked else 0.0


def figures(pairs: Sequence[tuple[Row, Row]], positions: int) -> dict[str, Any]:
    """The figures over ``pairs`` (decode row, reread row) out of ``positions`` decode rows."""
    deltas, tops, kls, bounded, unreadable, worst = [], [], [], 0, 0, None
    for decoded, reread in pairs:
        value, bound = _value(reread)
        if value is None:  # the engine gave no trustworthy row here (rows.reread_rows)
            unreadable += 1
            continue
        delta = abs(decoded["logprob"] - value)
        bounded += bound
        deltas.append(delta)
        if worst is None or delta > worst["abs_delta"]:
            worst = {"token": decoded["token"], "decode": decoded["logprob"], "reread": value,
                     "abs_delta": round(delta, 6), "outside_top": bound}  # fmt: skip
        if decoded["top"] and reread["top"]:
            tops.append(decoded["top"][0][0] == reread["top"][0][0])
        kl = _kl(decoded, reread)
        if kl is not None:
            kls.append(kl)
    return {
        "positions": len(deltas),
        "unreadable": unreadable,
        "aligned_share": round(len(deltas) / (positions - unreadable), 6)
        if positions > unreadable
        else 0.0,
        "mean_abs_delta": round(sum(deltas) / len(deltas), 6) if deltas else None,
        "p99_abs_delta": round(quantile(deltas, 0.99), 6) if deltas else None,
        "top1_agreement": round(sum(tops) / len(tops), 6) if tops else None,
        "flips": len(tops) - sum(tops),
        "top1_positions": len(tops),
        "mean_kl": round(sum(kls) / len(kls), 6) if kls else None,
        "outside_top": bounded,
        "worst": worst,
    }


# Figures kept out of the summary's claims: the worst position and the flip count are said in
# the judgement's words (and re-derived with it); runs recorded before the count verify alike.
UNCLAIMED = ("worst", "flips", "top1_positions")


def judge(found: Mapping[str, Any], bounds: Bounds, what: str) -> Verdict:
    """The figures against their bounds; too few aligned positions: not judged (ok, with
    ``judged`` False and the reason), never a pass on nothing."""
    if not found["positions"] or found["aligned_share"] < bounds.min_aligned_share:
        return Verdict.passed(
            judged=False,
            judgement=f"not judged: {found['positions']} positions aligned "
            f"({found['aligned_share']:.0%} < {bounds.min_aligned_share:.0%})",
        )
    checks = (
        ("mean |Δ logprob|", found["mean_abs_delta"], bounds.max_mean_abs_delta, "<="),
        ("p99 |Δ logprob|", found["p99_abs_delta"], bounds.max_p99_abs_delta, "<="),
        ("mean KL", found["mean_kl"], bounds.max_mean_kl, "<="),
    )
    problems = [
        f"{name} {value:.3f} ({'>' if op == '<=' else '<'} {limit})"
        for name, value, limit, op in checks
        if value is not None and (value > limit if op == "<=" else value < limit)
    ]
    if flipped := _flip_problem(found, bounds):
        problems.insert(2, flipped)
    if problems:
        worst = found["worst"] or {}
        said = f"{what}: " + ", ".join(problems)
        said += f" over {found['positions']} positions; worst {worst.get('token')!r}: "
        said += f"{worst.get('decode')} against {worst.get('reread')}"
        return Verdict.failed(said, judged=True, judgement="differs")
    return Verdict.passed(judged=True, judgement="agrees")


def _flip_problem(found: Mapping[str, Any], bounds: Bounds) -> str | None:
    """The argmax flips against their bound (module flips.py), or None where they hold."""
    share, limit = found["top1_agreement"], bounds.min_top1_agreement
    if share is None:
        return None
    if bounds.flip_alpha is None or "flips" not in found:  # a run judged by the bare share
        return f"top-1 agreement {share:.3f} (< {limit})" if share < limit else None
    flips, n, rate = found["flips"], found["top1_positions"], 1 - limit
    p = flip_p(flips, n, rate)
    if p >= bounds.flip_alpha:
        return None
    return (
        f"top-1 agreement {share:.3f}: {flips} argmax flips of {n}, more than a flip rate of "
        f"{rate:.0%} explains (binomial p {p:.2g} < {bounds.flip_alpha})"
    )


KNOWN_SHIFTS = (0, 1)


def shift_fit(
    decoded: Sequence[Row], logprobs: Any, prompt: str, top_n: int
) -> dict[int, float | None]:
    """A reread's mean |Δ| against its own decode, read at each known shift (None: nothing
    paired). A serve's reread of its own answer agrees with it at the engine's true shift; the
    gate checks that the one it reads at fits no worse than the other (a model whose prompt
    gains a BOS moves llama-cpp-python's rows), so a misreading is the suite's error, never the
    candidate's FAIL."""
    fits: dict[int, float | None] = {}
    for shift in KNOWN_SHIFTS:
        rows = answer_rows(reread_rows(logprobs, shift, top_n) or [], prompt)[1] or []
        fits[shift] = figures(aligned(decoded, rows), len(decoded))["mean_abs_delta"]
    return fits


def misread(fits: Mapping[int, float | None], shift: int) -> int | None:
    """The other shift when it fits far better than ``shift`` (under a tenth of its mean |Δ| and
    under 0.05 nat), else None."""
    here = fits.get(shift)
    if here is None:
        return None
    for other, fit in fits.items():
        if other != shift and fit is not None and fit < 0.05 and fit < here / 10:
            return other
    return None
