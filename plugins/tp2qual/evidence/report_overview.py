"""The report's opening: the campaign overview (a row per candidate, linked to its section: its
ratios to its reference, agreement and accuracy figures, what its verdict rests on), the chart
comparing decode rates and TTFTs with their 95 % CIs, each candidate's history across the dated
runs beside this one, and the overview as CSV and JSON for a spreadsheet or another tool."""

from __future__ import annotations

import base64
from pathlib import Path
from urllib.parse import quote

from tp2qual.artifacts.layout import REPORT
from tp2qual.evidence.charts import Interval, interval_chart
from tp2qual.evidence.overview import Summary, history, summarize_run
from tp2qual.evidence.overview_figures import accuracy_words, agreement_words
from tp2qual.evidence.overview_table import RATIOS, cell, ratio_words, to_csv, to_json, tp1_words
from tp2qual.evidence.report_model import (
    Chart,
    History,
    HistoryRow,
    Overview,
    OverviewRow,
)
from tp2qual.perf.comparison import RATIO_METHOD


def _ci(ci: tuple[float | None, float | None]) -> str:
    low, high = ci
    return f"[{cell(low)}, {cell(high)}]" if low is not None and high is not None else ""


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}x"


def _share(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} s"


RATIO_LABELS = {"decode": "decode", "ttft": "TTFT", "itl": "ITL"}


def overview_row(row: Summary) -> OverviewRow:
    return OverviewRow(
        candidate=row.candidate,
        verdict=row.verdict,
        gate=row.gate,
        cause=row.cause,
        decode=cell(row.decode_tok_s),
        decode_ci=_ci(row.decode_ci),
        ttft=cell(row.ttft_s),
        ttft_ci=_ci(row.ttft_ci),
        reference=row.reference,
        reference_where=row.reference_where,
        ratios=tuple(
            (
                RATIO_LABELS[n],
                ratio_words(getattr(row, f"{n}_ratio"), getattr(row, f"{n}_ratio_ci")),
            )
            for n in RATIOS
            if getattr(row, f"{n}_ratio") is not None
        ),
        tp1=_ratio(row.tp1_ratio),
        tp1_note=tp1_words(row),
        roofline=_share(row.roofline_share),
        agreement=agreement_words(row.agreement) or "—",
        accuracy=accuracy_words(row.agreement) or "—",
        floors=row.floors,
        rests_on=row.rests_on,
        wall=_seconds(row.wall_s),
        host=row.host or "—",
        lane_after=row.lane_after,
    )


def history_row(row: Summary, current: str) -> HistoryRow:
    return HistoryRow(
        run_id=row.run_id,
        report=f"../{quote(row.run_id)}/{REPORT}",
        current=row.run_id == current,
        verdict=row.verdict,
        gate=row.gate,
        decode=cell(row.decode_tok_s),
        ttft=cell(row.ttft_s),
        tp1=(
            ratio_words(row.decode_ratio, row.decode_ratio_ci)
            if row.decode_ratio is not None
            else (f"{_ratio(row.tp1_ratio)} (dated baseline)" if row.tp1_ratio is not None else "—")
        ),
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
    histories = []
    for row in rows:
        runs = history(run_dir, row.candidate)
        if len(runs) > 1:
            histories.append(
                History(row.candidate, tuple(history_row(r, run_dir.name) for r in runs))
            )
    return Overview(
        tuple(overview_row(r) for r in rows),
        charts(rows),
        tuple(histories),
        _data_uri("text/csv", to_csv(rows)),
        _data_uri("application/json", to_json(rows)),
        RATIO_METHOD,
    )
