"""Accuracy on generated arithmetic word problems, and whether it dropped against a reference.

Our own small generator rather than a library (reasoning-gym would be one more dependency in
every engine's venv for what fits in 30 lines): two- and three-step integer word problems from a
fixed seed, each with its exact answer, scored GSM8K-style (the last number in the answer).
Accuracy carries a Wilson score interval; a drop against the reference is judged *paired*, item
by item, by the exact one-sided McNemar test (a binomial test on the discordant items). A test
that could not fail is no evidence, so the verdict says its power: the smallest drop it detects
(``detectable_drop``), and "not judged: no power" when that is larger than the drop the
candidate allows. ``settled`` lets a run stop asking once the test's outcome is certain. Pure:
no I/O. An item's score is True or False, or None when the length budget cut the answer (never
counted as right or wrong, never paired).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping
from typing import Any

from tp2qual.checks.verdict import Verdict

_NAMES = ("Ana", "Ben", "Chen", "Dara", "Eli", "Farah", "Goran", "Hana")
_THINGS = ("apples", "pencils", "stamps", "marbles", "books", "shells")


def generate(n: int, seed: int) -> list[dict[str, Any]]:
    """``n`` problems, the same for the same seed on every Python (``random.Random`` is
    specified to reproduce its sequence for a given seed)."""
    rng = random.Random(seed)
    items = []
    for i in range(n):
        who, thing = rng.choice(_NAMES), rng.choice(_THINGS)
        a, b, c = rng.randint(12, 60), rng.randint(2, 9), rng.randint(3, 20)
        if i % 2:
            text = (
                f"{who} has {a} {thing}. {who} buys {b} bags with {c} {thing} in each bag, "
                f"then gives away {a // 2} {thing}. How many {thing} does {who} have now?"
            )
            answer = a + b * c - a // 2
        else:
            text = (
                f"{who} had {a} {thing} and got {c} more. {who} shared them equally among "
                f"{b} friends and kept any left over. How many {thing} did each friend get?"
            )
            answer = (a + c) // b
        items.append({"id": f"arith-{i:03d}", "question": text, "answer": answer})
    return items


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str | None) -> float | None:
    found = _NUMBER.findall(text or "")
    return float(found[-1].replace(",", "")) if found else None


def score(text: str | None, answer: int) -> bool:
    return last_number(text) == float(answer)


def wilson(correct: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95 % Wilson score interval of ``correct / n`` ((0, 1) when nothing was asked)."""
    if n == 0:
        return 0.0, 1.0
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_drop_p(lost: int, gained: int) -> float:
    """Exact one-sided McNemar p-value for a drop: among the discordant items, the chance of
    ``lost`` or more that only the reference got right if neither side were better."""
    n = lost + gained
    return sum(math.comb(n, k) for k in range(lost, n + 1)) / 2**n if n else 1.0


def drop_threshold(alpha: float) -> int:
    """The fewest lost items, none gained, for which the exact drop test is significant at
    ``alpha``: the smallest k with ``mcnemar_drop_p(k, 0) = 2^-k < alpha``."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1], not {alpha}")
    k = 0
    while mcnemar_drop_p(k, 0) >= alpha:
        k += 1
    return k


_NEEDED: dict[float, list[int]] = {}  # alpha -> lost_needed for gained 0, 1, 2, ...


def lost_needed(gained: int, alpha: float) -> int:
    """The fewest lost items for which the exact drop test is significant at ``alpha`` when
    ``gained`` items were gained (``drop_threshold`` at none). It never falls as ``gained``
    grows, so each is searched from the one before and kept (a pure cache)."""
    known = _NEEDED.setdefault(alpha, [drop_threshold(alpha)])
    while len(known) <= gained:
        g, k = len(known), known[-1]
        while mcnemar_drop_p(k, g) >= alpha:
            k += 1
        known.append(k)
    return known[gained]


def _pmf(n: int, q: float) -> list[float]:
    """Binomial(n, q) probabilities, in log space so thousands of items neither under- nor
    overflow."""
    if q <= 0 or q >= 1:
        return [float(k == (n if q >= 1 else 0)) for k in range(n + 1)]
    lq, lr = math.log(q), math.log1p(-q)
    base = math.lgamma(n + 1)
    return [
        math.exp(base - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lq + (n - k) * lr)
        for k in range(n + 1)
    ]


def drop_power(n: int, p_ref: float, drop: float, alpha: float, gain: float = 0.0) -> float:
    """The chance that the exact one-sided paired McNemar test over ``n`` items finds a true
    drop ``drop`` significant at ``alpha``, when the serve churns both ways.

    Conditional on the reference's answers (the paired test's own conditioning): it answers
    ``c = round(n * p_ref)`` items right and ``w = n - c`` wrong. The serve gains each of the
    ``w`` with probability ``gain`` (numeric noise that flips items both ways) and loses each
    of the ``c`` with probability ``q = (drop + (1 - p_ref) * gain) / p_ref``, so the expected
    net loss is ``n * drop`` (up to the rounding of ``c``: q is kept a smooth function of the
    drop, so the detectable drop falls steadily with n). Power = Σ_g P(gained = g) ·
    P(lost >= lost_needed(g)). With ``gain`` 0 every discordant item is a lost one (the
    one-sided model this suite used before issue 40). A drop too large for the churn
    (``q`` > 1) is impossible: power 0."""
    correct = round(n * p_ref)
    wrong = n - correct
    if n <= 0 or correct <= 0:
        return 0.0
    q = (drop + (1 - p_ref) * gain) / p_ref
    if q > 1 + 1e-12:
        return 0.0
    lost = _pmf(correct, min(1.0, q))
    tail = [0.0] * (correct + 2)  # tail[k] = P(lost >= k)
    for k in range(correct, -1, -1):
        tail[k] = tail[k + 1] + lost[k]
    total = 0.0
    for g, chance in enumerate(_pmf(wrong, gain)):
        if chance < 1e-15:  # no weight (all but g = 0 at gain 0): spare the exact threshold
            continue
        need = lost_needed(g, alpha)
        total += chance * (tail[need] if need <= correct else 0.0)
    return min(1.0, total)


def detectable_drop(
    n: int, p_ref: float, alpha: float, power: float = 0.8, gain: float = 0.0
) -> float | None:
    """The smallest true drop D in accuracy (``p_ref`` to ``p_ref - D``, on a 0.001 grid) that
    the exact one-sided paired McNemar test over ``n`` items detects with ``power`` when the
    serve gains back a share ``gain`` of the items the reference got wrong (``drop_power``);
    None when even the largest drop that churn allows is not detected so often.

    Gained items raise the p-value and widen the lost count's spread, so D grows with
    ``gain``: at 70 items and a reference at 90 %, a drop of 0.10 is seen with power 0.84,
    0.64, 0.53, 0.45 at gain 0, 0.2, 0.4, 0.6. The power grows with D, so D is found by
    bisection over the grid."""
    correct = round(n * p_ref)
    if n <= 0 or p_ref <= 0 or correct < drop_threshold(alpha):
        return None
    most = p_ref - (1 - p_ref) * gain  # every right item lost (q = 1), net of the gains
    if most <= 0:  # the churn alone gains back more than there is to lose: no drop to see
        return None
    grid = [i / 1000 for i in range(1, math.floor(most * 1000 + 1e-9) + 1)]
    if not grid or grid[-1] < most:
        grid.append(most)

    def enough(d: float) -> bool:
        return drop_power(n, p_ref, d, alpha, gain) >= power

    if not enough(grid[-1]):
        return None
    low, high = 0, len(grid) - 1  # enough(grid[high]) holds throughout
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(grid[mid]) else (mid + 1, high)
    return grid[high]


def items_needed(
    p_ref: float,
    alpha: float,
    max_drop: float,
    power: float = 0.8,
    limit: int = 2000,
    gain: float = 0.0,
) -> int | None:
    """The fewest items over which ``detectable_drop`` (at ``gain``) is at most ``max_drop``
    (None when more than ``limit`` would be needed). D falls as n grows, so n is found by
    bisection."""

    def enough(n: int) -> bool:
        d = detectable_drop(n, p_ref, alpha, power, gain)
        return d is not None and d <= max_drop

    if not enough(limit):
        return None
    low, high = 1, limit
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid + 1, high)
    return high


def _paired(
    own: Mapping[str, bool | None], ref: Mapping[str, bool | None]
) -> tuple[list[str], int, int]:
    """The items both sides scored (neither cut), and among them the lost and gained counts."""
    shared = [i for i, v in own.items() if v is not None and ref.get(i) is not None]
    lost = sum(bool(ref[i]) and not own[i] for i in shared)
    gained = sum(bool(own[i]) and not ref[i] for i in shared)
    return shared, lost, gained


def settled(
    own: Mapping[str, bool | None],
    ref: Mapping[str, bool | None],
    remaining: int,
    alpha: float,
) -> str | None:
    """Why asking the ``remaining`` items cannot change the drop test's outcome, or None when
    it still can. The p-value falls with each lost item and rises with each gained one (a
    concordant or cut item leaves it), so the extremes bound every outcome: significant even if
    all remaining are gained, or not significant even if all remaining are lost."""
    if remaining < 0:
        raise ValueError(f"remaining must be >= 0, not {remaining}")
    _, lost, gained = _paired(own, ref)
    worst = mcnemar_drop_p(lost, gained + remaining)
    if worst < alpha:
        return (
            f"dropped whatever the {remaining} remaining items do: {lost} lost, {gained} "
            f"gained, p = {worst:.3g} < {alpha} even if all are gained"
        )
    best = mcnemar_drop_p(lost + remaining, gained)
    if best >= alpha:
        return (
            f"no drop can be found with {remaining} items left: {lost} lost, {gained} "
            f"gained, p = {best:.3g} >= {alpha} even if all are lost"
        )
    return None


def judge_accuracy(
    own: Mapping[str, bool | None],
    ref: Mapping[str, bool | None] | None,
    *,
    alpha: float,
    max_drop: float,
    planned: int | None = None,
    gain_rate: float = 0.0,
) -> Verdict:
    """Accuracy with its interval; with a reference, the paired drop test on the items both
    scored, and whether that test had the power to see a drop of ``max_drop``.

    ``planned``: the items the run meant to ask, when it stopped early because ``settled``
    said the outcome was certain. Such a stop gives the outcome the full run would have, so the
    power is the full run's: the paired items plus those not asked (items asked but cut count
    for nothing). Without it, the paired items alone.

    ``gain_rate``: the stated prior share of the reference's wrong items a serve gains back by
    churn alone; the power is computed at it or at the share this pair shows, whichever is
    larger (a drop test that churn blinds must not claim the power of a one-way model)."""
    scored = [v for v in own.values() if v is not None]
    n, correct = len(scored), sum(scored)
    low, high = wilson(correct, n)
    measures: dict[str, Any] = {
        "items": n,
        "cut": len(own) - n,
        "correct": correct,
        "accuracy": round(correct / n, 6) if n else None,
        "wilson_low": round(low, 6),
        "wilson_high": round(high, 6),
    }
    if ref is None:
        return Verdict.passed(**measures, judged=False, judgement="no reference: no drop claimed")
    shared, lost, gained = _paired(own, ref)
    p = mcnemar_drop_p(lost, gained)
    p_ref = sum(bool(ref[i]) for i in shared) / len(shared) if shared else None
    power_n = len(shared) + max(0, planned - len(own)) if planned is not None else len(shared)
    wrong = sum(not ref[i] for i in shared)
    gain = max(gain_rate, gained / wrong if wrong else 0.0)
    d = detectable_drop(power_n, p_ref, alpha, gain=gain) if p_ref is not None else None
    measures |= {
        "paired_items": len(shared),
        "lost": lost,
        "gained": gained,
        "p_drop": round(p, 6),
        "reference_accuracy": round(p_ref, 6) if p_ref is not None else None,
        "detectable_drop": d,
        "gain_rate": round(gain, 6),
    }
    if p < alpha:
        return Verdict.failed(
            f"accuracy dropped: {lost} items only the reference answered, {gained} only this "
            f"serve (exact McNemar p = {p:.3g} < {alpha})",
            **measures,
            judged=True,
            judgement="dropped",
        )
    if d is None or d > max_drop:
        return Verdict.passed(
            **measures, judged=False, judgement=_no_power(power_n, p_ref, d, alpha, max_drop, gain)
        )
    return Verdict.passed(
        **measures,
        judged=True,
        judgement=f"no drop detected (D={d:g} at 80 % power, gain rate {gain:.2g})",
    )


def _no_power(
    n: int, p_ref: float | None, d: float | None, alpha: float, max_drop: float, gain: float
) -> str:
    """The judgement of a test too weak to see the allowed drop: n, the reference's accuracy
    and the smallest drop it detects (none at all: why)."""
    if p_ref is None:
        return f"not judged: no power (n={n}, reference accuracy none: no item paired, D=none)"
    if d is None:
        why = (
            f"D=none: the reference gets {round(n * p_ref)} right, p < {alpha} needs "
            f"{drop_threshold(alpha)} lost"
        )
    else:
        why = f"smallest detectable drop D={d:g} > max {max_drop:g} at gain rate {gain:.2g}"
    return f"not judged: no power (n={n}, reference accuracy {p_ref:.3g}, {why})"
