"""What a floor key names (its grammar and direction: tp2qual/floor_table.py) and the statistic
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
from tp2qual.floor_table import AT_LEAST, AT_MOST, DIRECTIONS, STATS, direction, split_key

__all__ = ["AT_LEAST", "AT_MOST", "DIRECTIONS", "STATS", "direction", "split_key", "statistic"]


def statistic(key: str, samples: Sequence[Mapping[str, Any]]) -> float | None:
    """The statistic a key names over measured samples (None: no sample has the figure)."""
    figure, stat = split_key(key) or (key, "")
    values = [
        float(s[figure])
        for s in samples
        if isinstance(s.get(figure), int | float) and not isinstance(s.get(figure), bool)
    ]
    return summarize(values).as_dict()[stat] if values else None
