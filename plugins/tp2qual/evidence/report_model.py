"""The report's data model and its pure formatting: frozen views filled from a run folder by
``report.py`` and rendered by ``templates/report.html.j2``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.stats import ratio as stats_ratio

OUTCOME_LABELS = {
    "passed": "passed",
    "failed": "failed",
    "error": "suite error",
    "blocked": "blocked",
    "not_applicable": "not applicable",
    "not_run": "not run",
}
FIGURES = {
    "ttft_s": ("TTFT", "s"),
    "tpot_s": ("TPOT", "s/token"),
    "decode_tok_s": ("decode rate", "tokens/s"),
    "e2e_s": ("end-to-end", "s"),
}
PLOTTED = ("ttft_s", "decode_tok_s")
SUMMARY, SAMPLES = "throughput_summary.json", "throughput_samples.jsonl"


@dataclass(frozen=True)
class Link:
    href: str  # relative to the run folder, URL-quoted
    label: str
    size: int | None = None
    sha256: str = ""


@dataclass(frozen=True)
class ClaimRow:
    name: str
    value: str
    artifact: Link | None
    sha256: str


@dataclass(frozen=True)
class Cause:
    """One diagnosed cause of a failure, as the report shows it."""

    rule: str
    cause: str
    remedy: str
    confidence: str
    evidence: tuple[str, ...]  # "line N: text"
    log: str


@dataclass(frozen=True)
class GateRow:
    name: str
    outcome: str
    label: str
    reason: str
    seconds: float
    claims: tuple[ClaimRow, ...]
    tests: tuple[tuple[str, str], ...]
    excerpt: tuple[str, ...]
    links: tuple[Link, ...]
    sampling: str = ""  # as stated in the gate's first generating request
    causes: tuple[Cause, ...] = ()  # the diagnosis of the log a failure left


@dataclass(frozen=True)
class Fact:
    label: str
    value: str


@dataclass(frozen=True)
class StatRow:
    figure: str
    unit: str
    cells: tuple[str, ...]  # n, mean, median, stdev, p90, p99, 95 % CI


@dataclass(frozen=True)
class Plot:
    title: str
    unit: str
    width: int
    height: int
    polyline: str
    dots: tuple[tuple[float, float, str], ...]  # x, y, tooltip
    top: str
    bottom: str


@dataclass(frozen=True)
class CompareRow:
    figure: str
    now: str
    before: str
    ratio: str


@dataclass(frozen=True)
class Comparison:
    run_id: str
    report: str  # relative link to the older run's report
    verdict_now: str
    verdict_before: str
    rows: tuple[CompareRow, ...]


@dataclass(frozen=True)
class ClosedLoop:
    """The NCCL probe as it failed, and once more with the diagnosed remedy, side by side."""

    summary: str
    first: tuple[str, ...]  # last lines of nccl_probe.log
    second: tuple[str, ...]  # last lines of nccl_probe_remedy.log


@dataclass(frozen=True)
class CandidateView:
    name: str
    verdict: str
    failed_gate: str
    started: str
    description: str
    gates: tuple[GateRow, ...]
    identity: tuple[Fact, ...]
    launch_flags: tuple[str, ...]
    failures: tuple[GateRow, ...]
    suite_errors: tuple[GateRow, ...]
    stats: tuple[StatRow, ...]
    plots: tuple[Plot, ...]
    context: tuple[Fact, ...]  # TP1 baseline ratios, roofline, server-side timings
    artifacts: tuple[Link, ...]
    comparison: Comparison | None
    closed_loop: ClosedLoop | None = None


@dataclass(frozen=True)
class RunView:
    run_id: str
    generated: str
    candidates: tuple[CandidateView, ...]
    verify_summary: str
    verify_ok: bool | None  # None: not verified yet (mid-run refresh)
    verify_lines: tuple[str, ...]


def fmt(value: Any, width: int = 160) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.4g}"
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def ratio(now: Any, before: Any) -> str:
    """``checks.stats.ratio`` as the report shows it."""
    numbers = isinstance(now, int | float) and isinstance(before, int | float)
    value = stats_ratio(float(now), float(before)) if numbers else None
    return "—" if value is None else f"{value:.3f}x"


def plot(title: str, unit: str, values: list[float], width: int = 360, height: int = 130) -> Plot:
    """An SVG line of one value per sample, scaled to the box with a margin for labels."""
    left, right, top, bottom = 8, 8, 14, 18
    low, high = min(values), max(values)
    span = (high - low) or abs(high) or 1.0
    low, high = low - span * 0.1, high + span * 0.1
    step = (width - left - right) / max(1, len(values) - 1)
    points = []
    for i, value in enumerate(values):
        x = left + i * step if len(values) > 1 else width / 2
        y = top + (high - value) / (high - low) * (height - top - bottom)
        points.append((round(x, 1), round(y, 1), f"sample {i}: {value:.4g} {unit}"))
    polyline = " ".join(f"{x},{y}" for x, y, _ in points)
    return Plot(title, unit, width, height, polyline, tuple(points), f"{high:.4g}", f"{low:.4g}")
