"""The report's context ladder of a candidate: gate 06's rows (``capacity_ladder.jsonl``) as a
table and as plots of TTFT, effective prefill and decode rate against the prompt's tokens.
Timings are recorded, never judged (perf/ladder.py says how each is measured)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tp2qual.artifacts.claims import read_records
from tp2qual.evidence.charts import BLUE, RED, xy_chart
from tp2qual.evidence.report_model import Chart, fmt
from tp2qual.perf.ladder import LADDER_FILE

COLUMNS = (
    "row", "asked for", "prompt tokens", "fill", "TTFT first output (s)",
    "TTFT first visible (s)", "effective prefill (tok/s)", "decode (tok/s)", "output tokens",
    "finish", "needle",
)  # fmt: skip
HOW = (
    "one streamed request per row, the needle in the middle of its prompt; prompt tokens from the "
    "stream's usage (else a plain request counting the same prompt); effective prefill = prompt "
    "tokens / TTFT to the first output, queueing and HTTP included; decode = (output tokens - 1) "
    "/ (last output - first output), over few tokens where the answer is short"
)


@dataclass(frozen=True)
class LadderView:
    rows: tuple[tuple[str, ...], ...]  # cells, worded
    charts: tuple[Chart, ...]
    columns: tuple[str, ...] = COLUMNS
    how: str = HOW


def ladder_view(cand_dir: Path) -> LadderView | None:
    """The candidate's ladder, smallest prompt first; None where gate 06 recorded none."""
    path = cand_dir / LADDER_FILE
    try:
        rows = read_records(path) if path.is_file() else []
    except ValueError:
        return None
    if not rows:
        return None
    rows.sort(key=lambda r: _num(r.get("prompt_tokens")) or _num(r.get("planned_tokens")) or 0)
    return LadderView(tuple(_cells(r) for r in rows), _charts(rows))


def _num(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else None


def _cells(r: dict[str, Any]) -> tuple[str, ...]:
    counted = f"{fmt(r.get('prompt_tokens'))} ({r.get('prompt_tokens_from')})"
    found = "found" if r.get("needle_found") else f"MISSED: {r.get('why') or '—'}"
    return (
        str(r.get("tag")), ", ".join(map(str, r.get("asked") or ())), counted, fmt(r.get("fill")),
        fmt(r.get("ttft_output_s")), fmt(r.get("ttft_visible_s")),
        fmt(r.get("prefill_tok_s_effective")), fmt(r.get("decode_tok_s")),
        f"{fmt(r.get('output_tokens'))} ({r.get('output_tokens_from')})",
        fmt(r.get("finish_reason")), found,
    )  # fmt: skip


def _points(rows: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    pts = [(_num(r.get("prompt_tokens")), _num(r.get(key))) for r in rows]
    return [(x, y) for x, y in pts if x is not None and y is not None]


def _charts(rows: list[dict[str, Any]]) -> tuple[Chart, ...]:
    out = []
    ttft = [("first output", BLUE, _points(rows, "ttft_output_s")),
            ("first visible", RED, _points(rows, "ttft_visible_s"))]  # fmt: skip
    rates = [
        ("effective prefill", "prefill_tok_s_effective", "tokens/s, queueing included"),
        ("decode rate", "decode_tok_s", "tokens/s"),
    ]
    if any(pts for _, _, pts in ttft):
        svg = xy_chart("TTFT", "s", "prompt tokens", [s for s in ttft if s[2]])
        out.append(Chart("TTFT of each ladder row against its prompt tokens", svg))
    for title, key, unit in rates:
        if pts := _points(rows, key):
            svg = xy_chart(title, unit, "prompt tokens", [(title, BLUE, pts)])
            out.append(Chart(f"{title} of each ladder row against its prompt tokens", svg))
    return tuple(out)
