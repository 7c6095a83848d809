"""What a floor key names: ``<figure>_<stat>``, the way the figure is judged, and the statistic
over measured samples. Pure; shared by the floors (perf/floors.py) and what they are fractions of
(perf/floor_basis.py).

Figures as perf/sampling.py defines them, statistics as checks/stats.py ``summarize`` gives
them. A rate must reach its floor (decode tok/s ≥), a latency must stay under it (TTFT, TPOT,
ITL, E2E ≤): a TTFT floor read as a lower bound would pass the slow serve and fail the fast one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tp2qual.checks.stats import summarize

AT_LEAST = "≥"
AT_MOST = "≤"

# Per figure of perf/sampling.py: rates at least their floor, latencies at most.
DIRECTIONS: dict[str, str] = {
    "decode_tok_s": AT_LEAST,
    "ttft_s": AT_MOST,
    "tpot_s": AT_MOST,
    "itl_p50_s": AT_MOST,
    "itl_p90_s": AT_MOST,
    "itl_p99_s": AT_MOST,
    "e2e_s": AT_MOST,
}
STATS = ("median", "mean", "p90", "p99", "min", "max")


def split_key(key: str) -> tuple[str, str] | None:
    """``decode_tok_s_median`` -> (``decode_tok_s``, ``median``); None for no known figure/stat."""
    figure, _, stat = key.rpartition("_")
    return (figure, stat) if figure in DIRECTIONS and stat in STATS else None


def direction(key: str) -> str:
    parts = split_key(key)
    if parts is None:
        raise ValueError(f"{key}: not a <figure>_<stat> floor key")
    return DIRECTIONS[parts[0]]


def statistic(key: str, samples: Sequence[Mapping[str, Any]]) -> float | None:
    """The statistic a key names over measured samples (None: no sample has the figure)."""
    figure, stat = split_key(key) or (key, "")
    values = [
        float(s[figure])
        for s in samples
        if isinstance(s.get(figure), int | float) and not isinstance(s.get(figure), bool)
    ]
    return summarize(values).as_dict()[stat] if values else None
