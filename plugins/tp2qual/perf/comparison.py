"""What a throughput result is measured against: the candidate's dated TP1 baseline, and the
single-stream decode roofline of its GPUs. Pure: takes figures and a read finding, returns
JSON-ready dicts.

A baseline counts as *corroborated* only when it points at a raw local artifact (a finding.json
under results/, or a run folder holding one) that carries the figure; numbers copied from prose
are shown, with their date and source, as uncorroborated.

A figure is compared only under the suite's own definition (perf/sampling.py): a local finding's
figures are, by construction; a figure copied from elsewhere only when ``baseline.definitions``
says so for it (``"perf/sampling.py"``). Any other figure is shown with the reason it is not
compared (its stated definition, or that none is stated), never divided by.

``ratio_interval`` compares two sets of samples of the same definition (a TP2 serve's and its
TP1 reference's, measured by gate 08), with a confidence interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from tp2qual.artifacts.finding import Finding, Verdict
from tp2qual.checks.stats import ratio, t_critical_95
from tp2qual.checks.topology import memory_bandwidth_gbs
from tp2qual.perf.floors import refusal
from tp2qual.perf.roofline import decode_bound, fraction


def compare_baseline(
    summary: Mapping[str, Mapping[str, float]],
    baseline: Mapping[str, Any] | None,
    recorded: Finding | None = None,
) -> dict[str, Any]:
    """TP(this)/TP(baseline) ratios per figure; ``recorded`` is the baseline's finding if local."""
    if not baseline:
        return {"baseline": None}
    corroborated = recorded is not None and recorded.verdict == Verdict.PASS
    figures = recorded.figures("throughput") if recorded and corroborated else {}
    figures = figures or dict(baseline.get("figures", {}))
    definitions = {} if corroborated else dict(baseline.get("definitions", {}))
    rows = []
    for key, then in sorted(figures.items()):
        name, _, stat = key.rpartition("_")
        now = summary.get(name, {}).get(stat)
        refused = None if corroborated else refusal(key, definitions)
        row = {"figure": key, "now": now, "baseline": then}
        row["ratio"] = None if refused else ratio(now, then)
        rows.append({**row, "refused": refused} if refused else row)
    return {
        "baseline": {k: baseline.get(k) for k in ("date", "source", "tp", "finding", "note")},
        "corroborated": corroborated,
        "rows": rows,
    }


def roofline_for(
    model: Mapping[str, Any],
    gpus_wanted: Mapping[str, Any],
    topology: Mapping[str, Any] | None,
    tp: int,
    measured_decode_tok_s: float | None,
) -> dict[str, Any]:
    """Bound and measured fraction, or why it cannot be computed."""
    params, bits = model.get("active_params_b"), model.get("bits_per_weight")
    gpus = (topology or {}).get("gpus") or []
    bandwidth = memory_bandwidth_gbs(gpus[0]) if gpus else None
    source = "nvml" if bandwidth else "candidate"
    bandwidth = bandwidth or gpus_wanted.get("bandwidth_gbs")
    if not (params and bits and bandwidth):
        return {
            "computed": False,
            "why": "needs model.active_params_b, model.bits_per_weight and a GPU bandwidth",
        }
    bound = decode_bound(params, bits, bandwidth, tp)
    measured = measured_decode_tok_s
    return {
        "computed": True,
        "bandwidth_from": source,
        **asdict(bound),
        "measured_decode_tok_s": measured,
        "fraction": fraction(measured, bound) if measured else None,
    }


RATIO_METHOD = (
    "ratio of the means of the two sets of samples; 95 % CI by the delta method on the log "
    "ratio, Student t with Welch-Satterthwaite degrees of freedom"
)


def ratio_interval(now: Sequence[float], then: Sequence[float]) -> dict[str, Any] | None:
    """mean(now) / mean(then) with its 95 % CI, from the two sets of samples (independent runs
    of two serves), or None when either has fewer than two samples or a mean that is not > 0.

    var(log r) = s1²/(n1·m1²) + s2²/(n2·m2²); the interval is r·exp(±t·se), with t at the
    Welch-Satterthwaite df (checks/stats.py ``t_critical_95``), so it is never negative and is
    symmetric on a log scale (a TP2 serve at half its reference reads [0.48, 0.52], not ±)."""
    a, b = [float(v) for v in now], [float(v) for v in then]
    if len(a) < 2 or len(b) < 2:
        return None
    (m1, s1), (m2, s2) = _mean_sd(a), _mean_sd(b)
    if m1 <= 0 or m2 <= 0:
        return None
    v1, v2 = s1**2 / (len(a) * m1**2), s2**2 / (len(b) * m2**2)
    r = m1 / m2
    if v1 + v2 == 0:
        return {"ratio": r, "low": r, "high": r, "n": len(a), "n_reference": len(b)}
    df = (v1 + v2) ** 2 / (v1**2 / (len(a) - 1) + v2**2 / (len(b) - 1))
    half = t_critical_95(max(1, math.floor(df))) * math.sqrt(v1 + v2)
    return {
        "ratio": r,
        "low": r * math.exp(-half),
        "high": r * math.exp(half),
        "n": len(a),
        "n_reference": len(b),
    }


def _mean_sd(values: Sequence[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values)
