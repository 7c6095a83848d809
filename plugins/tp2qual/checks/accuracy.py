"""Accuracy on generated arithmetic word problems, and whether it dropped against a reference.

Our own small generator rather than a library (reasoning-gym would be one more dependency in
every engine's venv for what fits in 30 lines): two- and three-step integer word problems from a
fixed seed, each with its exact answer, scored GSM8K-style (the last number in the answer).
Accuracy carries a Wilson score interval; a drop against the reference is judged *paired*, item
by item, by the exact one-sided McNemar test (a binomial test on the discordant items). Pure:
no I/O.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Mapping, Sequence
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


def judge_accuracy(
    own: Mapping[str, bool], ref: Mapping[str, bool] | None, alpha: float
) -> Verdict:
    """Accuracy with its interval; with a reference, the paired drop test on the shared items."""
    n, correct = len(own), sum(own.values())
    low, high = wilson(correct, n)
    measures: dict[str, Any] = {
        "items": n,
        "correct": correct,
        "accuracy": correct / n if n else None,
        "wilson_low": round(low, 6),
        "wilson_high": round(high, 6),
    }
    if ref is None:
        return Verdict.passed(**measures)
    shared: Sequence[str] = [i for i in own if i in ref]
    lost = sum(ref[i] and not own[i] for i in shared)
    gained = sum(own[i] and not ref[i] for i in shared)
    p = mcnemar_drop_p(lost, gained)
    measures |= {"paired_items": len(shared), "lost": lost, "gained": gained, "p_drop": p}
    measures["reference_accuracy"] = sum(ref[i] for i in shared) / len(shared) if shared else None
    if p < alpha:
        return Verdict.failed(
            f"accuracy dropped: {lost} items only the reference answered, {gained} only this "
            f"serve (exact McNemar p = {p:.3g} < {alpha})",
            **measures,
        )
    return Verdict.passed(**measures)
