"""A campaign at a glance: one row per candidate per run, read from what the run recorded.

Every figure comes from the candidate's finding (its claims) and the artifacts beside it:
decode rate and TTFT medians are the throughput gate's claims, their 95 % CIs come from
``throughput_summary.json``; the ratios to its reference (decode, TTFT, ITL, each with a CI from
the two sets of samples) from evidence/overview_reference.py; the floors and the basis each rests
on from ``throughput_floors.json``; the dated ``[baseline]`` ratio and its corroboration from
``throughput_comparison.json``; the roofline share from its claim; agreement and accuracy as the
few figures evidence/overview_figures.py names; and one sentence saying what the verdict rests on.

``summarize`` reads one candidate folder; ``history`` reads a candidate across the dated runs
beside a run; evidence/overview_table.py prints rows for ``python -m tp2qual compare``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tp2qual.artifacts.finding import (
    ERROR,
    FAILED,
    NOT_APPLICABLE,
    PASSED,
    Finding,
    Verdict,
    read_finding,
)
from tp2qual.artifacts.layout import FINDING
from tp2qual.artifacts.pass_sentence import pass_sentence, reference_verdict
from tp2qual.candidate import GATES
from tp2qual.evidence.overview_figures import named
from tp2qual.evidence.overview_reference import ReferenceRatios, reference_ratios
from tp2qual.perf.floors import FLOORS_FILE, Floor

SUMMARY, COMPARISON = "throughput_summary.json", "throughput_comparison.json"
Interval = tuple[float | None, float | None]
NONE: Interval = (None, None)


@dataclass(frozen=True)
class Summary:
    """One candidate in one run, as numbers and words (None: not recorded)."""

    run_id: str
    candidate: str
    verdict: str
    gate: str = ""  # the gate that decided a verdict other than PASS
    cause: str = ""  # why, in one line
    decode_tok_s: float | None = None  # median, claimed
    decode_ci: Interval = NONE
    ttft_s: float | None = None
    ttft_ci: Interval = NONE
    reference: str = ""  # [reference] candidate (a lane: its baseline)
    reference_where: str = ""  # the run its samples come from, or why there are no ratios
    decode_ratio: float | None = None  # ratio of means to the reference's samples
    decode_ratio_ci: Interval = NONE
    ttft_ratio: float | None = None
    ttft_ratio_ci: Interval = NONE
    itl_ratio: float | None = None  # each request's median chunk gap (itl_p50_s)
    itl_ratio_ci: Interval = NONE
    floors: str = ""  # each floor judged, with the basis it rests on
    tp1_ratio: float | None = None  # decode median / the dated [baseline]'s
    tp1_corroborated: bool | None = None  # None: no baseline recorded
    tp1_date: str = ""
    roofline_share: float | None = None
    agreement: dict[str, Any] = field(default_factory=dict)  # overview_figures.named()
    rests_on: str = ""  # one sentence: what the verdict rests on
    wall_s: float | None = None  # the candidate's gate time, server start-up included
    host: str = ""
    lane_after: str = ""  # an optional lane: the baseline candidate it runs after

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _number(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def decided_by(finding: Finding) -> tuple[str, str]:
    """The gate behind a verdict other than PASS, and its cause in one line."""
    if finding.verdict == Verdict.PASS:
        return "", ""  # none; a finding older than a gate has no entry for it (e.g. agreement)
    gate = finding.first(FAILED) or finding.first(ERROR)
    gate = gate or next(
        (g for g in GATES if finding.gates[g].outcome not in (PASSED, NOT_APPLICABLE)), None
    )
    if gate is None:
        return "", ""
    result = finding.gates[gate]
    causes = [f.get("cause") for f in (result.diagnosis or {}).get("findings", [])]
    words = next((c for c in causes if c), "") or result.reason or result.outcome.replace("_", " ")
    line = " ".join(str(words).split())
    return gate, line if len(line) <= 200 else line[:199] + "…"


def gate_claims(finding: Finding, gate: str) -> dict[str, Any]:
    """A gate's claims by name, whatever their value (the named figures pick what they show)."""
    result = finding.gates.get(gate)
    return {c.name: c.value for c in result.claims} if result is not None else {}


def _ci(stats: Any) -> Interval:
    stats = stats if isinstance(stats, Mapping) else {}
    return _number(stats.get("ci95_low")), _number(stats.get("ci95_high"))


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def host_of(finding: Finding) -> str:
    """The host that served: the ``--hosts`` name, else the hostname its GPUs were read on."""
    ident = finding.identity
    return str(
        _map(ident.get("docker_host")).get("name")
        or _map(_map(ident.get("topology")).get("host")).get("hostname")
        or _map(ident.get("host")).get("hostname")
        or ""
    )


def _floor_rows(judged: Mapping[str, Any]) -> list[Floor]:
    listed = judged.get("floors")
    rows = [f for f in listed if isinstance(f, Mapping)] if isinstance(listed, list) else []
    floors = []
    for row in rows:
        try:
            floors.append(Floor(**row))
        except (TypeError, ValueError):
            continue
    return floors


def floors_sentence(judged: Mapping[str, Any]) -> str:
    """The floors met, compact: ``decode_tok_s_median ≥ 10.4 (0.6 x), ttft_s_median ≤ 9.3 (2 x)
    of the reference tp1's figures (run …)`` — the reference and run said once when shared."""
    floors = _floor_rows(judged)
    measured = {(f.basis, f.of_candidate, f.of_run) for f in floors if f.of_run}
    shared = next(iter(measured)) if len(measured) == 1 else None
    parts = []
    for f in floors:
        head = f"{f.key} {f.direction} {f.value:.4g}"
        parts.append(
            f"{head} ({f.fraction:g} x)" if shared and f.of_run else f"{head} {f.basis_words()}"
        )
    if not parts:
        return ""
    tail = (
        f" of the {shared[0].replace('_', ' ')} {shared[1]}'s figures (run {shared[2]})"
        if shared
        else ""
    )
    return ", ".join(parts) + tail


def floors_words(judged: Mapping[str, Any]) -> str:
    """Each floor gate 08 judged with its basis (``throughput_floors.json``), in one line."""
    shown = [f.brief() for f in _floor_rows(judged)]
    if not shown and judged.get("not_derived"):
        return "not derived: " + "; ".join(map(str, judged["not_derived"]))
    return "; ".join(shown) or ("no floor set" if judged else "")


def rests_on(
    finding: Finding, gate: str, cause: str, floors: str, reference_standing: str | None = None
) -> str:
    """One sentence: what the verdict rests on. A PASS's is the one sentence of every place
    (artifacts/pass_sentence.py), then gate 08's floors."""
    verdict = finding.verdict or "INCOMPLETE"
    if verdict == Verdict.ERROR:
        return f"ERROR: the suite broke at {gate} ({cause}); not a finding about the candidate."
    if verdict != Verdict.PASS:
        return f"{verdict} at {gate or 'no gate'}: {cause}."
    said = pass_sentence(verdict, finding.spec, finding.gates.get("agreement"), reference_standing)
    throughput = (
        f"throughput floors met: {floors}" if floors else "throughput judged against no floor"
    )
    return f"{said}; {throughput}."


def summary_of(
    finding: Finding,
    run_id: str,
    stats: Mapping[str, Any],
    comparison: Mapping[str, Any],
    against: ReferenceRatios | None = None,
    judged: Mapping[str, Any] | None = None,
    reference_standing: str | None = None,
) -> Summary:
    """Pure: the row from a read finding, its throughput summary, its dated-baseline comparison,
    its ratios to its reference, its floors as judged and its named reference's verdict in the
    same run."""
    claimed = finding.figures("throughput")
    roof = next(
        (c.value for g, c in finding.claims() if c.name.endswith("fraction_of_roofline")), None
    )
    listed = comparison.get("rows")
    rows = {
        r.get("figure"): r
        for r in (listed if isinstance(listed, list) else [])
        if isinstance(r, Mapping)
    }
    baseline = _map(comparison.get("baseline"))
    seconds = sum(g.seconds for g in finding.gates.values())
    gate, cause = decided_by(finding)
    decode, ttft = (
        _number(claimed.get("decode_tok_s_median")),
        _number(claimed.get("ttft_s_median")),
    )
    against = against or ReferenceRatios()
    figures = named({**gate_claims(finding, "agreement"), **gate_claims(finding, "accuracy")})
    floors = floors_words(judged or {}) if decode is not None else ""
    return Summary(
        run_id=run_id,
        candidate=finding.candidate,
        verdict=finding.verdict or "INCOMPLETE",
        gate=gate,
        cause=cause,
        decode_tok_s=decode,  # an interval only beside a claimed median
        decode_ci=_ci(stats.get("decode_tok_s")) if decode is not None else NONE,
        ttft_s=ttft,
        ttft_ci=_ci(stats.get("ttft_s")) if ttft is not None else NONE,
        reference=against.reference,
        reference_where=against.where,
        decode_ratio=against.ratio("decode"),
        decode_ratio_ci=against.interval("decode"),
        ttft_ratio=against.ratio("ttft"),
        ttft_ratio_ci=against.interval("ttft"),
        itl_ratio=against.ratio("itl"),
        itl_ratio_ci=against.interval("itl"),
        floors=floors,
        tp1_ratio=_number((rows.get("decode_tok_s_median") or {}).get("ratio")),
        tp1_corroborated=bool(comparison.get("corroborated")) if baseline else None,
        tp1_date=str(baseline.get("date") or ""),
        roofline_share=_number(roof),
        agreement=figures,
        rests_on=rests_on(finding, gate, cause, floors_sentence(judged or {}), reference_standing),
        wall_s=seconds or None,
        host=host_of(finding),
        lane_after=finding.lane_after or "",
    )


def summarize(run_dir: Path, cand_dir: Path) -> Summary | None:
    """The row of one candidate folder, or None when its finding cannot be read."""
    finding = read_finding(cand_dir, run_dir)
    if finding is None:
        return None
    if not finding.candidate:
        finding = replace(finding, candidate=cand_dir.name)
    stats = _json(cand_dir / SUMMARY)
    comparison = _json(cand_dir / COMPARISON)
    judged = _json(cand_dir / FLOORS_FILE)
    return summary_of(
        finding,
        run_dir.name,
        stats if isinstance(stats, Mapping) else {},
        comparison if isinstance(comparison, Mapping) else {},
        reference_ratios(run_dir, cand_dir, finding),
        judged if isinstance(judged, Mapping) else {},
        reference_verdict(run_dir, finding.spec),
    )


def summarize_run(run_dir: Path) -> list[Summary]:
    rows = (summarize(run_dir, p.parent) for p in sorted(run_dir.glob(f"*/{FINDING}")))
    return [r for r in rows if r is not None]


def history(run_dir: Path, candidate: str, limit: int = 12) -> list[Summary]:
    """The candidate in the dated runs beside ``run_dir`` up to it, newest first."""
    runs = sorted(
        (
            p
            for p in run_dir.parent.iterdir()
            if p.is_dir() and not p.is_symlink() and p.name <= run_dir.name
            and (p / candidate / FINDING).is_file()
        ),
        key=lambda p: p.name,
        reverse=True,
    )  # fmt: skip
    rows = (summarize(p, p / candidate) for p in runs[:limit])
    return [r for r in rows if r is not None]
