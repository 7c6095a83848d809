"""The overview's rows printed: the terminal table of ``python -m tp2qual compare``, its CSV and
its JSON, carrying the same figures (the report's overview is filled from the same rows)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable
from typing import Any

from tp2qual.evidence.overview import Interval, Summary
from tp2qual.evidence.overview_figures import NAMES, accuracy_words, agreement_words
from tp2qual.perf.comparison import RATIO_METHOD

RATIOS = ("decode", "ttft", "itl")  # Summary.<name>_ratio and <name>_ratio_ci


def cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def tp1_words(row: Summary) -> str:
    """The dated ``[baseline]`` record's status (a record in prose, of the TP size it states; not
    a reference run)."""
    if row.tp1_corroborated is None:
        return "no dated baseline"
    how = "corroborated" if row.tp1_corroborated else "uncorroborated"
    return f"{how}, {row.tp1_date}" if row.tp1_date else how


def ratio_words(value: float | None, ci: Interval) -> str:
    """``0.913x [0.88, 0.95]``, or "—"."""
    if value is None:
        return "—"
    low, high = ci
    return f"{value:.3f}x" + (
        f" [{low:.3g}, {high:.3g}]" if low is not None and high is not None else ""
    )


def _pair(ci: Interval) -> str:
    return "—" if None in ci else f"[{cell(ci[0])}, {cell(ci[1])}]"


def named_columns(rows: Iterable[Summary]) -> list[str]:
    """The named agreement and accuracy figures any row holds, in the named list's order."""
    held = {k for r in rows for k in r.agreement}
    return [n for n in NAMES if n in held]


def flat(row: Summary, names: list[str]) -> dict[str, Any]:
    """The row as one flat record (CSV, the terminal): every interval split into low and high."""
    ratios: dict[str, Any] = {}
    for name in RATIOS:
        value, (low, high) = getattr(row, f"{name}_ratio"), getattr(row, f"{name}_ratio_ci")
        ratios |= {f"{name}_ratio": value, f"{name}_ratio_low": low, f"{name}_ratio_high": high}
    return {
        "run_id": row.run_id,
        "candidate": row.candidate,
        "verdict": row.verdict,
        "gate": row.gate,
        "decode_tok_s": row.decode_tok_s,
        "decode_ci95_low": row.decode_ci[0],
        "decode_ci95_high": row.decode_ci[1],
        "ttft_s": row.ttft_s,
        "ttft_ci95_low": row.ttft_ci[0],
        "ttft_ci95_high": row.ttft_ci[1],
        "reference": row.reference,
        "reference_where": row.reference_where,
        **ratios,
        "floors": row.floors,
        "tp1_ratio": row.tp1_ratio,
        "tp1_baseline": tp1_words(row),
        "roofline_share": row.roofline_share,
        "agreement": agreement_words(row.agreement),
        "accuracy": accuracy_words(row.agreement),
        **{k: row.agreement.get(k) for k in names},
        "wall_s": row.wall_s,
        "host": row.host,
        "cause": row.cause,
        "rests_on": row.rests_on,
    }


def to_csv(rows: list[Summary]) -> str:
    names = named_columns(rows)
    records = [flat(r, names) for r in rows]
    out = io.StringIO()
    if records:
        writer = csv.DictWriter(out, fieldnames=list(records[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in records)
    return out.getvalue()


def to_json(rows: list[Summary]) -> str:
    """One object per row; a row with ratios to its reference says how they were computed."""
    body = [
        r.as_dict() | ({"ratio_method": RATIO_METHOD} if r.decode_ratio is not None else {})
        for r in rows
    ]
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


COLUMNS = (
    "run_id", "candidate", "verdict", "gate", "decode_tok_s", "decode_ci95", "ttft_s", "ttft_ci95",
    "reference", "decode_x_ref", "ttft_x_ref", "itl_x_ref", "roofline_share", "wall_s", "host",
)  # fmt: skip


def table(rows: list[Summary]) -> list[str]:
    """Aligned columns for a terminal, then per row what its verdict rests on, its reference's
    run, its floors and its agreement and accuracy figures, in words."""
    shown = [
        {k: cell(v) for k, v in flat(r, []).items()}
        | {
            "gate": r.gate or "—",
            "decode_ci95": _pair(r.decode_ci),
            "ttft_ci95": _pair(r.ttft_ci),
            "reference": r.reference or "—",
            **{
                f"{n}_x_ref": ratio_words(getattr(r, f"{n}_ratio"), getattr(r, f"{n}_ratio_ci"))
                for n in RATIOS
            },
        }
        for r in rows
    ]
    body = [[line[c] for c in COLUMNS] for line in shown]
    widths = [
        max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(COLUMNS)
    ]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in [list(COLUMNS), ["-" * w for w in widths], *body]
    ]
    lines += ["", f"x_ref: {RATIO_METHOD}"]
    for r in rows:
        lines.append(f"{r.candidate} ({r.run_id}): {r.rests_on}")
        lines += [f"  {label}: {text}" for label, text in _details(r) if text]
    return lines


def _details(row: Summary) -> list[tuple[str, str]]:
    where = f"{row.reference}, {row.reference_where}" if row.reference else row.reference_where
    return [
        ("reference", where),
        ("floors", row.floors),
        ("agreement", agreement_words(row.agreement)),
        ("accuracy", accuracy_words(row.agreement)),
        ("dated record", tp1_words(row) if row.tp1_corroborated is not None else ""),
    ]
