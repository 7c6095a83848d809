"""The report's opening: the campaign overview (a row per candidate, linked to its section), the
chart comparing decode rates and TTFTs with their 95 % CIs, each candidate's history across the
dated runs beside this one, and the overview as CSV and JSON for a spreadsheet or another tool."""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import quote

from tp2qual.evidence.charts import Interval, interval_chart
from tp2qual.evidence.layout import REPORT
from tp2qual.evidence.overview import (
    Summary,
    cell,
    extra_columns,
    history,
    summarize_run,
    to_csv,
    to_json,
    tp1_words,
)
from tp2qual.evidence.report_model import (
    Chart,
    History,
    HistoryRow,
    Overview,
    OverviewRow,
)


def _ci(ci: tuple[float | None, float | None]) -> str:
    low, high = ci
    return f"[{cell(low)}, {cell(high)}]" if low is not None and high is not None else ""


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}x"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} s"


def overview_row(row: Summary, extras: list[str]) -> OverviewRow:
    return OverviewRow(
        candidate=row.candidate,
        verdict=row.verdict,
        gate=row.gate,
        cause=row.cause,
        decode=cell(row.decode_tok_s),
        decode_ci=_ci(row.decode_ci),
        ttft=cell(row.ttft_s),
        ttft_ci=_ci(row.ttft_ci),
        tp1=_ratio(row.tp1_ratio),
        tp1_note=tp1_words(row),
        roofline=_share(row.roofline_share),
        extra=tuple(_group(row, g) for g in extras),
        wall=_seconds(row.wall_s),
        host=row.host or "—",
        lane_after=row.lane_after,
    )


def groups(rows: list[Summary]) -> list[str]:
    """The extra columns: one per gate (or claim prefix) that recorded agreement or accuracy."""
    return sorted({k.split(".", 1)[0] for k in extra_columns(rows)})


def _group(row: Summary, group: str) -> str:
    said = [(k.split(".", 1)[1], v) for k, v in row.extra.items() if k.startswith(group + ".")]
    return " · ".join(f"{name} {cell(value)}" for name, value in said) or "—"


def history_row(row: Summary, current: str) -> HistoryRow:
    return HistoryRow(
        run_id=row.run_id,
        report=f"../{quote(row.run_id)}/{REPORT}",
        current=row.run_id == current,
        verdict=row.verdict,
        gate=row.gate,
        decode=cell(row.decode_tok_s),
        ttft=cell(row.ttft_s),
        tp1=_ratio(row.tp1_ratio),
        roofline=_share(row.roofline_share),
        wall=_seconds(row.wall_s),
    )


def charts(rows: list[Summary]) -> tuple[Chart, ...]:
    """Decode rate and TTFT medians of the candidates that measured them, with 95 % CIs."""
    decode = [Interval(r.candidate, r.decode_tok_s, *r.decode_ci) for r in rows if r.decode_tok_s]
    ttft = [Interval(r.candidate, r.ttft_s, *r.ttft_ci) for r in rows if r.ttft_s is not None]
    out = []
    if decode:
        words = "decode rate median per candidate (tokens/s, higher is better); whisker: 95 % CI"
        out.append(Chart(words, interval_chart("decode rate", "tokens/s", decode)))
    if ttft:
        words = "TTFT median per candidate (s, lower is better); whisker: 95 % CI"
        out.append(Chart(words, interval_chart("TTFT", "s", ttft)))
    return tuple(out)


def _data_uri(kind: str, text: str) -> str:
    return f"data:{kind};base64," + base64.b64encode(text.encode()).decode()


def build_overview(run_dir: Path) -> Overview:
    rows = summarize_run(run_dir)
    extras = groups(rows)
    histories = []
    for row in rows:
        runs = history(run_dir, row.candidate)
        if len(runs) > 1:
            histories.append(
                History(row.candidate, tuple(history_row(r, run_dir.name) for r in runs))
            )
    return Overview(
        tuple(extras),
        tuple(overview_row(r, extras) for r in rows),
        charts(rows),
        tuple(histories),
        _data_uri("text/csv", to_csv(rows)),
        _data_uri("application/json", to_json(rows)),
    )
