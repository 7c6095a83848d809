"""Gate 07's figures of one qualification run, read back from its evidence, and their spread
over runs against the bounds the run was judged by (agreement_spread.py).

Every figure comes from the run folder, never from the terminal: the transcript's summary line
(``agreement_transcript.jsonl``, kind ``summary``: the figures gate 07 judged and ``verify``
re-derives), the finding's gate-07 outcome, and the bounds from the finding's own
``candidate_spec`` merged over the suite's defaults (``Candidate.gate``), so a run is held against
what it was judged by. One figure is not in the summary: warm against cold (the summary keeps
only ``cached_prefix_agrees``); its largest |Δ logprob| is recomputed here from the transcript's
``warm`` and ``transcript`` lines by the gate's own walk (``closeness.compare`` with the rule
``evaluate._warm`` uses).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tp2qual.artifacts.claims import read_records
from tp2qual.artifacts.layout import read_json_object
from tp2qual.candidate import Candidate
from tp2qual.checks.agreement import closeness
from tp2qual.checks.agreement.evaluate import rule_of
from tp2qual.checks.agreement.kinds import OWN, SUMMARY, WARM

TRANSCRIPT, FINDING = "agreement_transcript.jsonl", "finding.json"


@dataclass(frozen=True)
class Figure:
    key: str  # the summary's field ("warm_max_abs_delta": recomputed, see the module doc)
    label: str
    bound: str | None  # the [gates.agreement] setting it is judged by
    op: str  # "<=" or ">="


# Against the reference (the candidate's summary): teacher forcing, then the closeness walk.
PAIR = (
    Figure("tf_mean_abs_delta", "teacher-forced mean |Δ|", "tf_max_mean_abs_delta", "<="),
    Figure("tf_p99_abs_delta", "teacher-forced p99 |Δ|", "tf_max_p99_abs_delta", "<="),
    Figure("tf_top1_agreement", "teacher-forced top-1 agreement", "tf_min_top1_agreement", ">="),
    Figure("tf_mean_kl", "teacher-forced mean KL", "tf_max_mean_kl", "<="),
    Figure("max_abs_delta_logprob", "walk max |Δ| (common prefix)", "max_abs_delta_logprob", "<="),
    Figure("max_divergence_gap", "walk divergence gap", "max_divergence_gap", "<="),
    Figure("exact_share", "walk exact share", "min_exact_share", ">="),
)
# Each serve on its own (near the bound judged by the self bounds: evaluate._self).
SERVE = (
    Figure("self_mean_abs_delta", "self mean |Δ|", "self_max_mean_abs_delta", "<="),
    Figure("self_p99_abs_delta", "self p99 |Δ|", "self_max_p99_abs_delta", "<="),
    Figure("self_top1_agreement", "self top-1 agreement", "self_min_top1_agreement", ">="),
    Figure("self_mean_kl", "self mean KL", "self_max_mean_kl", "<="),
    Figure("near_bound_mean_abs_delta", "near-bound mean |Δ|", "self_max_mean_abs_delta", "<="),
    Figure("near_bound_p99_abs_delta", "near-bound p99 |Δ|", "self_max_p99_abs_delta", "<="),
    Figure("near_bound_top1_agreement", "near-bound top-1", "self_min_top1_agreement", ">="),
    Figure("near_bound_mean_kl", "near-bound mean KL", "self_max_mean_kl", "<="),
    Figure("warm_max_abs_delta", "warm vs cold max |Δ|", "warm_max_abs_delta_logprob", "<="),
)


WARM_BOUND = "warm_max_abs_delta_logprob"


def serve_figures(run_dir: Path, name: str) -> dict[str, Any]:
    """One serve's gate-07 outcome, summary figures and bounds in one run (empty figures when
    the gate wrote no summary: cut short, not run, or the serve not in the run)."""
    folder = run_dir / name
    finding = read_json_object(folder / FINDING)
    gate = (finding.get("gates") or {}).get("agreement") or {}
    lines = read_records(folder / TRANSCRIPT) if (folder / TRANSCRIPT).is_file() else []
    summary = next((r for r in reversed(lines) if r.get("kind") == SUMMARY), {})
    settings = _settings(folder, finding)
    figures = dict(summary)
    if summary and settings:
        figures["warm_max_abs_delta"] = warm_max_abs_delta(lines, settings)
    return {
        "outcome": gate.get("outcome"),
        "reason": gate.get("reason"),
        "verdict": finding.get("verdict"),
        "figures": figures,
        "bounds": _bounds(settings),
    }


def _bounds(settings: dict[str, Any]) -> dict[str, Any]:
    """Each figure's bound as the run judged it: the warm walk at the self p99 in runs recorded
    before it had a bound of its own (evaluate._warm)."""
    bounds = {f.bound: settings.get(f.bound) for f in (*PAIR, *SERVE) if f.bound}
    if bounds.get(WARM_BOUND) is None:
        bounds[WARM_BOUND] = settings.get("self_max_p99_abs_delta")
    return bounds


def warm_max_abs_delta(lines: list[dict[str, Any]], settings: dict[str, Any]) -> float | None:
    """The largest |Δ logprob| of a warm decode against its cold one over their common prefix,
    by gate 07's walk (evaluate._warm); None when the serve decoded nothing warm."""
    own = {r["id"]: r for r in lines if r.get("kind") == OWN}
    cold = rule_of(settings)
    rule = closeness.Closeness(cold.top_n, float(_bounds(settings)[WARM_BOUND]),
                               cold.max_divergence_gap)  # fmt: skip
    walks = [
        closeness.compare(closeness.decode_of(w), closeness.decode_of(own[w["id"]]), rule)
        for w in lines
        if w.get("kind") == WARM and w["id"] in own
    ]
    deltas = [walk.measures["max_abs_delta_logprob"] for walk in walks]
    return max(deltas) if deltas else None


def _settings(folder: Path, finding: dict[str, Any]) -> dict[str, Any]:
    spec = finding.get("candidate_spec")
    if not spec:
        return {}
    return Candidate(path=folder / "candidate.toml", spec=spec).gate("agreement")


# ---------------------------------------------------------------------------------------------
# Spread over runs


def spread(values: list[float], bound: float | None, op: str) -> dict[str, Any]:
    """min/median/max of the runs' values, the worst run, and the margin bound / worst. A ">="
    bound on a share (top-1, exact share) is read as its complement (the flip rate): margin =
    (1 - bound) / (1 - worst), so both kinds read "how many times the worst run fits"."""
    if not values:
        return {"n": 0}
    worst = max(values) if op == "<=" else min(values)
    out = {"n": len(values), "min": min(values), "median": statistics.median(values),
           "max": max(values), "worst": worst, "bound": bound}  # fmt: skip
    if bound is None or (op == ">=" and bound <= 0):
        out["margin"] = None  # no bound, or one that never binds (min_exact_share 0)
    elif op == "<=":
        out["margin"] = bound / worst if worst > 0 else math.inf
    else:
        allowed, seen = 1.0 - bound, 1.0 - worst
        out["margin"] = allowed / seen if seen > 0 else math.inf
    return out


def table(rows: list[dict[str, Any]], figures: tuple[Figure, ...], who: str) -> list[str]:
    """Markdown lines: one per figure, every run's value, min/median/max, bound, margin."""
    runs = [r for r in rows if r["figures"]]
    head = f"| {who} figure | runs | min / median / max | bound | worst-run margin |"
    lines = [head, "| --- | --- | --- | --- | --- |"]
    for f in figures:
        values = [r["figures"].get(f.key) for r in runs]
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        bound = next((r["bounds"].get(f.bound) for r in runs if f.bound), None)
        s = spread(numbers, bound, f.op)
        each = ", ".join(_num(v) for v in values)
        mid = f"{_num(s.get('min'))} / {_num(s.get('median'))} / {_num(s.get('max'))}"
        lines.append(f"| {f.label} | {each} | {mid} | {f.op} {_num(bound)} | {_margin(s)} |")
    return lines


def _num(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return str(v)
    return f"{v:.4f}" if isinstance(v, float) else str(v)


def _margin(s: dict[str, Any]) -> str:
    m = s.get("margin")
    if m is None:
        return "—"
    if math.isinf(m):
        return "∞ (worst run 0)"
    flag = " **< 1.5x**" if m < 1.5 else ""
    return f"{m:.1f}x{flag}"


def compact(columns: dict[str, list[dict[str, Any]]], figures: tuple[Figure, ...]) -> list[str]:
    """One markdown table, a column per pair or serve: each cell 'worst (median) op bound:
    margin', with that column's own bound (candidate files may override the defaults)."""
    lines = ["| figure | " + " | ".join(columns) + " |",
             "| --- | " + " | ".join("---" for _ in columns) + " |"]  # fmt: skip
    for f in figures:
        cells = []
        for rows in columns.values():
            runs = [r for r in rows if r["figures"]]
            values = [r["figures"].get(f.key) for r in runs]
            numbers = [float(v) for v in values if isinstance(v, int | float)]
            bound = next((r["bounds"].get(f.bound) for r in runs if f.bound), None)
            s = spread(numbers, bound, f.op)
            said = f"{_num(s.get('worst'))} ({_num(s.get('median'))}) {f.op} {_num(bound)}: "
            cells.append(said + _margin(s) if s["n"] else "—")
        lines.append(f"| {f.label} | " + " | ".join(cells) + " |")
    return lines
