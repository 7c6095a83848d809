"""Statistics against hand-computed values, numpy's percentile rule and ``statistics``."""

from __future__ import annotations

import math
import statistics

import pytest

from tp2qual.checks.stats import Summary, percentile, ratio, summarize, t_critical_95


def test_summary_of_one_to_five_by_hand() -> None:
    s = summarize([3, 1, 5, 2, 4])
    # mean 3, sample sd sqrt(10/4), se = sd / sqrt(5) = 0.70711, t(0.975, 4) = 2.776
    half = 2.776 * math.sqrt(2.5) / math.sqrt(5)
    assert (s.n, s.mean, s.median, s.min, s.max) == (5, 3.0, 3.0, 1.0, 5.0)
    assert s.stdev == pytest.approx(1.5811388, abs=1e-7)
    assert s.ci95_low == pytest.approx(3 - half) == pytest.approx(1.03707, abs=1e-5)
    assert s.ci95_high == pytest.approx(4.96293, abs=1e-5)
    assert s.p90 == pytest.approx(4.6)  # h = 4 * 0.9 = 3.6 -> 4 + 0.6 * (5 - 4)
    assert s.p99 == pytest.approx(4.96)


def test_throughput_samples_interval() -> None:
    tokens_per_s = [101.2, 98.7, 100.4, 99.9, 102.3, 97.8, 100.1, 101.0]
    s = summarize(tokens_per_s)
    assert s.mean == pytest.approx(statistics.fmean(tokens_per_s))
    assert s.stdev == pytest.approx(statistics.stdev(tokens_per_s))
    assert s.median == pytest.approx(statistics.median(tokens_per_s))
    # mean 100.175; squared deviations sum to 14.195 -> sd sqrt(14.195 / 7) = 1.42403,
    # se = 1.42403 / sqrt(8) = 0.50347; t(0.975, 7) = 2.365 -> half-width 1.19071
    assert s.mean == pytest.approx(100.175)
    assert s.ci95_low is not None and s.ci95_high is not None
    assert s.ci95_high - s.mean == pytest.approx(1.19071, abs=1e-5)
    assert s.ci95_low < s.mean < s.ci95_high


def test_single_sample_has_no_interval() -> None:
    s = summarize([42.0])
    assert (s.n, s.mean, s.median, s.stdev, s.p90, s.p99) == (1, 42.0, 42.0, 0.0, 42.0, 42.0)
    assert s.ci95_low is None
    assert s.ci95_high is None


def test_constant_samples_have_zero_width_interval() -> None:
    s = summarize([7, 7, 7])
    assert s.stdev == 0.0
    assert s.ci95_low == s.ci95_high == 7.0


def test_as_dict_is_flat_and_complete() -> None:
    d = summarize([1.0, 2.0]).as_dict()
    assert list(d) == [
        "n",
        "mean",
        "median",
        "stdev",
        "min",
        "max",
        "p90",
        "p99",
        "ci95_low",
        "ci95_high",
    ]
    assert d["n"] == 2
    assert d["p90"] == pytest.approx(1.9)


def test_summary_is_frozen() -> None:
    s = summarize([1.0, 2.0])
    assert isinstance(s, Summary)
    with pytest.raises(AttributeError):
        s.mean = 0.0  # type: ignore[misc]


def test_summarize_rejects_empty() -> None:
    with pytest.raises(ValueError, match="at least one"):
        summarize([])


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        # numpy.percentile(values, q) with the default method="linear"
        ([1, 2, 3, 4], 50, 2.5),
        ([1, 2, 3, 4], 25, 1.75),
        ([1, 2, 3, 4], 90, 3.7),
        ([10, 20, 30, 40, 50], 99, 49.6),
        ([15, 20, 35, 40, 50], 40, 29.0),
        ([5, 1, 3], 0, 1.0),
        ([5, 1, 3], 100, 5.0),
        ([2.5], 73, 2.5),
    ],
)
def test_percentile_matches_numpy_linear(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_agrees_with_statistics_inclusive_quantiles() -> None:
    data = [0.31, 0.12, 0.55, 0.47, 0.29, 0.88, 0.61, 0.05, 0.73, 0.42, 0.19]
    quartiles = statistics.quantiles(data, n=4, method="inclusive")
    assert [percentile(data, q) for q in (25, 50, 75)] == pytest.approx(quartiles)


@pytest.mark.parametrize("q", [-1, 100.5])
def test_percentile_rejects_bad_q(q: float) -> None:
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], q)


def test_percentile_rejects_empty() -> None:
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042)],
)
def test_t_table(df: int, expected: float) -> None:
    assert t_critical_95(df) == expected


@pytest.mark.parametrize(
    ("df", "exact"),
    # exact t(0.975, df) from standard tables / scipy.stats.t.ppf
    [(31, 2.0395), (40, 2.0211), (60, 2.0003), (120, 1.9799), (1000, 1.9623)],
)
def test_t_beyond_table_uses_expansion(df: int, exact: float) -> None:
    assert t_critical_95(df) == pytest.approx(exact, abs=2e-4)


def test_t_is_continuous_at_table_edge_and_tends_to_normal() -> None:
    assert t_critical_95(30) > t_critical_95(31) > t_critical_95(32)
    assert t_critical_95(10**7) == pytest.approx(1.959964, abs=1e-5)
    with pytest.raises(ValueError):
        t_critical_95(0)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [(10.0, 4.0, 2.5), (0.0, 3.0, 0.0), (1.0, 0.0, None), (1.0, None, None), (None, 2.0, None)],
)
def test_ratio(a: float | None, b: float | None, expected: float | None) -> None:
    assert ratio(a, b) == expected
