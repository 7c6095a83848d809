"""The report's data model and its pure formatting: frozen views filled from a run folder by
``report.py`` and rendered by ``templates/report.html.j2``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.stats import ratio as stats_ratio
from tp2qual.evidence.charts import Svg
from tp2qual.evidence.handover_view import HandoverView
from tp2qual.evidence.topology_view import TopologyView

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
class CheckRow:
    """One check a gate ran or skipped (its test), in words: what a pass rests on."""

    what: str  # the test's name as words: "model pin resolves"
    outcome: str  # passed | failed | error | skipped
    reason: str = ""  # why it was skipped


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
    checks: tuple[CheckRow, ...] = ()  # every check the gate ran and skipped, with the reason


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
class Chart:
    caption: str
    svg: Svg


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
    plots: tuple[Chart, ...]
    context: tuple[Fact, ...]  # TP1 baseline ratios, roofline, server-side timings
    artifacts: tuple[Link, ...]
    comparison: Comparison | None
    closed_loop: ClosedLoop | None = None
    topology: TopologyView | None = None
    topology_link: Link | None = None  # the raw snapshot
    reference: tuple[Fact, ...] = ()  # gate 07's reference, as identity/reference.json records it
    ladder: Any = None  # gate 06's context ladder (ladder_view.LadderView), None where not run


@dataclass(frozen=True)
class OverviewRow:
    """One candidate in the overview; cells already worded (\"—\" when not recorded)."""

    candidate: str
    verdict: str
    gate: str
    cause: str
    decode: str
    decode_ci: str
    ttft: str
    ttft_ci: str
    reference: str  # "" when none is named
    reference_where: str  # the run its samples come from, or why there are no ratios
    ratios: tuple[tuple[str, str], ...]  # ("decode", "0.913x [0.88, 0.95]"), TTFT, ITL
    tp1: str  # the dated [baseline] record's ratio
    tp1_note: str
    roofline: str
    agreement: str
    accuracy: str
    floors: str
    rests_on: str
    wall: str
    host: str
    lane_after: str = ""


@dataclass(frozen=True)
class HistoryRow:
    run_id: str
    report: str  # relative link to that run's report
    current: bool
    verdict: str
    gate: str
    decode: str
    ttft: str
    tp1: str
    roofline: str
    wall: str


@dataclass(frozen=True)
class History:
    candidate: str
    rows: tuple[HistoryRow, ...]


@dataclass(frozen=True)
class Overview:
    rows: tuple[OverviewRow, ...]
    charts: tuple[Chart, ...]
    history: tuple[History, ...]  # candidates with an earlier run beside this one
    csv_href: str  # data: URIs, so the export needs no file beside the report
    json_href: str
    ratio_method: str = ""  # how the ratios to a reference and their CIs were computed


@dataclass(frozen=True)
class RunView:
    run_id: str
    generated: str
    candidates: tuple[CandidateView, ...]
    verify_summary: str
    verify_ok: bool | None  # None: not verified yet (mid-run refresh)
    verify_lines: tuple[str, ...]
    overview: Overview | None = None
    handover: HandoverView | None = None  # the serves this run took the GPUs from


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
