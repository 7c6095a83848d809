"""The argmax flip bound: a binomial test over the positions judged, not a bare share.

A healthy pair flips its argmax at a few near-ties (TP2 vs TP1 on vLLM CPU: 1.3 % of the
teacher-forced positions; docker vs local llama.cpp: 2.4 %). A serve that breaks near-ties the
other way flips many positions while it moves the chosen tokens' logprobs by less than the gap
it swapped, which the |Δ| and KL bounds do not see. The bound states the largest flip rate a
healthy serve may have (``1 - min_top1_agreement``) and FAILs when the flips counted are more
than that rate explains: the one-sided binomial tail ``P(X >= flips | n, rate) < alpha``.
So few positions (the near-bound prompt's 32) do not fail a healthy serve on two flips, and
over the gate's 400 positions the fault it catches with 80 % power is stated
(``detectable_flip_rate``). Pure.
"""

from __future__ import annotations

import math


def flip_p(flips: int, n: int, rate: float) -> float:
    """P(X >= flips) for X ~ Binomial(n, rate): how likely a serve flipping at ``rate`` shows
    this many flips or more (log space, exact)."""
    if flips <= 0:
        return 1.0
    if flips > n or rate <= 0:
        return 0.0
    if rate >= 1:
        return 1.0
    lr, lq, base = math.log(rate), math.log1p(-rate), math.lgamma(n + 1)
    return min(1.0, sum(
        math.exp(base - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * lr + (n - k) * lq)
        for k in range(flips, n + 1)
    ))  # fmt: skip


def flips_fail(flips: int, n: int, rate: float, alpha: float) -> bool:
    """Whether ``flips`` of ``n`` are more than a flip rate of ``rate`` explains at ``alpha``."""
    return flip_p(flips, n, rate) < alpha


def flip_threshold(n: int, rate: float, alpha: float) -> int | None:
    """The fewest flips of ``n`` that FAIL (None: no count does)."""
    return next((k for k in range(n + 1) if flips_fail(k, n, rate, alpha)), None)


def detectable_flip_rate(n: int, rate: float, alpha: float, power: float = 0.8) -> float | None:
    """The smallest true flip rate (on a 0.001 grid) that FAILs with ``power`` over ``n``
    positions: P(Binomial(n, f) >= flip_threshold) >= power. None where no rate does."""
    need = flip_threshold(n, rate, alpha)
    if need is None:
        return None
    return next((f / 1000 for f in range(1, 1001) if flip_p(need, n, f / 1000) >= power), None)
