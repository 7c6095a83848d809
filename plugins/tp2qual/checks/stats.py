"""Summary statistics for throughput and latency samples, stdlib only.

Benchmarks repeat a measurement a handful of times; a mean alone hides whether two runs
differ, so the summary carries a Student-t 95 % confidence interval of the mean and the tail
percentiles that latency targets are written against.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

# Two-sided 95 % Student-t critical values t(0.975, df) for df = 1..30 (standard tables).
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip
_Z975 = statistics.NormalDist().inv_cdf(0.975)


def t_critical_95(df: int) -> float:
    """Two-sided 95 % t critical value.

    Table for df <= 30; beyond, the Cornish-Fisher expansion of t around the normal quantile
    (Abramowitz & Stegun 26.7.5), within 1e-4 of the exact value there, rather than the
    normal 1.96, which would make intervals ~4 % too narrow at df = 31.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    return z + g1 / df + g2 / df**2 + g3 / df**3


def percentile(values: Sequence[float], q: float) -> float:
    """q-th percentile (0..100) with linear interpolation, numpy's default method."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    ordered = sorted(values)
    h = (len(ordered) - 1) * q / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None when either is missing or b is zero (no speed-up from nothing)."""
    if a is None or b is None or b == 0:
        return None
    return a / b


@dataclass(frozen=True)
class Summary:
    """Figures for one series of samples; the interval is None below two samples."""

    n: int
    mean: float
    median: float
    stdev: float
    min: float
    max: float
    p90: float
    p99: float
    ci95_low: float | None
    ci95_high: float | None

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)


def summarize(values: Sequence[float]) -> Summary:
    """Summarise samples; sample stdev (n - 1) and a t interval, as n is usually small."""
    if not values:
        raise ValueError("summarize needs at least one value")
    data = [float(v) for v in values]
    n, mean = len(data), statistics.fmean(data)
    stdev = statistics.stdev(data) if n > 1 else 0.0
    half = t_critical_95(n - 1) * stdev / math.sqrt(n) if n > 1 else None
    return Summary(
        n=n,
        mean=mean,
        median=statistics.median(data),
        stdev=stdev,
        min=min(data),
        max=max(data),
        p90=percentile(data, 90),
        p99=percentile(data, 99),
        ci95_low=None if half is None else mean - half,
        ci95_high=None if half is None else mean + half,
    )
