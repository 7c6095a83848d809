"""The report's performance part of a candidate: its statistics table, per-sample charts with the
candidate's floors drawn in, what the samples are measured against (its reference's measured
figures, the dated TP1 baseline, roofline, the engine's own timings) and the previous run beside
this one."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from tp2qual.artifacts.claims import read_records
from tp2qual.artifacts.finding import read_finding
from tp2qual.artifacts.layout import FINDING, REPORT, read_json_object
from tp2qual.evidence.charts import sample_chart
from tp2qual.evidence.protocol_view import protocol_facts
from tp2qual.evidence.report_model import (
    FIGURES,
    PLOTTED,
    SAMPLES,
    SUMMARY,
    Chart,
    CompareRow,
    Comparison,
    Fact,
    StatRow,
    fmt,
    ratio,
)
from tp2qual.evidence.throughput_reference import recorded_bases
from tp2qual.perf.floor_basis import MeasuredBasis
from tp2qual.perf.floor_keys import statistic
from tp2qual.perf.floors import AT_LEAST, DIRECTIONS, FLOORS_FILE, NO_FLOOR


def stat_rows(summary: Any) -> tuple[StatRow, ...]:
    rows = []
    summary = summary if isinstance(summary, dict) else {}
    ordered = [k for k in FIGURES if k in summary] + sorted(set(summary) - set(FIGURES))
    for key, stats in ((k, summary[k]) for k in ordered):
        if not isinstance(stats, dict):
            continue
        title, unit = FIGURES.get(key, (key, ""))
        ci = f"[{fmt(stats.get('ci95_low'))}, {fmt(stats.get('ci95_high'))}]"
        cells = tuple(fmt(stats.get(k)) for k in ("n", "mean", "median", "stdev", "p90", "p99"))
        rows.append(StatRow(title, unit, (*cells, ci)))
    return tuple(rows)


def floor_of(key: str, floors: dict[str, Any], unit: str) -> tuple[float, str] | None:
    """The candidate's floor on a figure (``decode_tok_s_median = 5``), drawn on its samples
    with its direction (rates ≥, latencies ≤: perf/floors.py)."""
    for name, value in floors.items():
        figure, _, stat = name.rpartition("_")
        if figure == key and isinstance(value, int | float) and not isinstance(value, bool):
            way = DIRECTIONS.get(figure, AT_LEAST)
            return float(value), f"floor: {stat} {way} {fmt(float(value))} {unit}"
    return None


def sample_charts(cand_dir: Path, floors: dict[str, Any]) -> tuple[Chart, ...]:
    """One chart per plotted figure: each measured sample by its number, the floor drawn in."""
    path = cand_dir / SAMPLES
    if not path.is_file():
        return ()
    try:
        samples = [r for r in read_records(path) if r.get("phase", "sample") == "sample"]
    except ValueError:
        return ()
    charts = []
    for key in PLOTTED:
        points = [
            (int(r.get("i", k)), float(r[key]))
            for k, r in enumerate(samples)
            if isinstance(r.get(key), int | float) and not isinstance(r.get(key), bool)
        ]
        if points:
            title, unit = FIGURES[key]
            floor = floor_of(key, floors, unit)
            svg = sample_chart(title, unit, points, floor)
            words = (
                f"{title} of each of the {len(points)} measured samples ({unit}), warm-up left out"
            )
            charts.append(Chart(words + ("; dashed: the candidate's floor" if floor else ""), svg))
    return tuple(charts)


def performance_context(cand_dir: Path) -> tuple[Fact, ...]:
    """What the samples are measured against: the dated record (of its own TP size) and the
    roofline."""
    comparison_ = read_json_object(cand_dir / "throughput_comparison.json") or {}
    roof = read_json_object(cand_dir / "roofline.json") or {}
    facts: list[tuple[str, str]] = []
    if isinstance(base := comparison_.get("baseline"), dict):
        status = (
            "corroborated by a local finding"
            if comparison_.get("corroborated")
            else "uncorroborated: no raw artifact of it here"
        )
        facts.append(
            (
                "dated record",
                f"{base.get('date')} · TP{base.get('tp')} · {status} · {base.get('source')}",
            )
        )
        listed = comparison_.get("rows")
        rows = [r for r in listed if isinstance(r, dict)] if isinstance(listed, list) else []
        for row in rows:
            compared = f"= {ratio(row.get('now'), row.get('baseline'))}"
            facts.append(
                (
                    f"{row.get('figure')}: this / baseline",
                    f"{fmt(row.get('now'))} / {fmt(row.get('baseline'))} "
                    + (f"not compared: {row['refused']}" if row.get("refused") else compared),
                )
            )
    if roof.get("computed"):
        inputs = (
            f"TP{roof['tp']}, {fmt(roof['active_params_b'])}B active x "
            f"{fmt(roof['bits_per_weight'])} bit, {fmt(roof['bandwidth_gbs'])} GB/s per GPU "
            f"({roof['bandwidth_from']})"
        )
        facts.append(("decode roofline", f"{fmt(roof['bound_tok_s'])} tok/s: {inputs}"))
        measured = fmt(roof.get("measured_decode_tok_s"))
        facts.append(("measured / roofline", f"{measured} tok/s = {fmt(roof.get('fraction'))}"))
    elif roof:
        facts.append(("decode roofline", f"not computed: {roof.get('why')}"))
    facts += protocol_facts(cand_dir)  # a capacity-protocol run beside its dated records
    facts += basis_facts(recorded_bases(cand_dir))
    facts += floor_facts(read_json_object(cand_dir / FLOORS_FILE))
    facts += server_timing_facts(read_json_object(cand_dir / "server_timings.json") or {})
    return tuple(Fact(k, v) for k, v in facts)


def basis_facts(bases: dict[str, MeasuredBasis | str]) -> list[tuple[str, str]]:
    """The measured figures gate 08's floors were derived of (its reference, a lane's baseline),
    as it copied them, or why there were none."""
    facts = []
    for role, basis in bases.items():
        label = f"{role.replace('_', ' ')} measured"
        if isinstance(basis, str):
            facts.append((label, f"none: {basis}"))
            continue
        medians = [
            f"{key} {fmt(value)}"
            for key in ("decode_tok_s_median", "ttft_s_median", "itl_p50_s_median")
            if (value := statistic(key, basis.samples)) is not None
        ]
        facts.append((label, f"{basis.candidate}, {basis.where()}: " + ", ".join(medians)))
    return facts


def floor_facts(judged: dict[str, Any]) -> list[tuple[str, str]]:
    """Gate 08's floors as judged, each with its direction and source; none set said so."""
    if not judged:
        return []
    listed = [f for f in judged.get("floors") or [] if isinstance(f, dict)]
    facts = [
        (f"floor {f.get('key')}", f"{f.get('direction')} {fmt(f.get('value'))} ({f.get('source')})")
        for f in listed
    ]
    return facts or [("floors", str(judged.get("note") or NO_FLOOR))]


def judged_floor_values(cand_dir: Path) -> dict[str, Any]:
    """``{key: bound}`` of the floors gate 08 judged (written and derived), for the charts."""
    listed = read_json_object(cand_dir / FLOORS_FILE).get("floors")
    rows = [f for f in listed if isinstance(f, dict)] if isinstance(listed, list) else []
    return {str(f.get("key")): f.get("value") for f in rows}


def server_timing_facts(timings: dict[str, Any]) -> list[tuple[str, str]]:
    """The engine's own window means beside the client's (seconds)."""
    if not timings:
        return []
    client = timings.get("client_means") or {}
    facts = [("engine's own timings", str(timings.get("source")))]
    for key, found in (timings.get("server") or {}).items():
        server_s = found.get("mean_s") if isinstance(found, dict) else found
        client_key = "tpot_s" if key == "itl_s" else key
        facts.append(
            (
                f"{key}: client / engine",
                f"{fmt(client.get(client_key))} / "
                f"{fmt(server_s)} = {ratio(client.get(client_key), server_s)}",
            )
        )
    return facts


def previous_run(run_dir: Path, candidate: str) -> Path | None:
    """The newest older run folder beside this one holding this candidate's finding."""
    older = [
        p
        for p in run_dir.parent.iterdir()
        if p.is_dir()
        and not p.is_symlink()
        and p.name < run_dir.name
        and (p / candidate / FINDING).is_file()
    ]
    return max(older, key=lambda p: p.name) if older else None


def comparison(run_dir: Path, candidate: str, verdict: str) -> Comparison | None:
    before_dir = previous_run(run_dir, candidate)
    if before_dir is None:
        return None
    before = read_finding(before_dir / candidate, run_dir)
    now_stats = read_json_object(run_dir / candidate / SUMMARY) or {}
    old_stats = read_json_object(before_dir / candidate / SUMMARY) or {}
    medians = {
        k: (now_stats[k].get("median"), old_stats[k].get("median"))
        for k in FIGURES
        if isinstance(now_stats.get(k), dict) and isinstance(old_stats.get(k), dict)
    }
    rows = tuple(
        CompareRow(f"{FIGURES[k][0]} median ({FIGURES[k][1]})", fmt(now), fmt(old), ratio(now, old))
        for k, (now, old) in medians.items()
    )
    return Comparison(
        before_dir.name,
        f"../{quote(before_dir.name)}/{REPORT}",
        verdict,
        (before.verdict if before else "") or "?",
        rows,
    )
