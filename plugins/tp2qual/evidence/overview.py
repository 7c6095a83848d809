"""A campaign at a glance: one row per candidate per run, read from what the run recorded.

Every figure comes from the candidate's finding (its claims) and the artifacts beside it:
decode rate and TTFT medians are the throughput gate's claims, their 95 % CIs come from
``throughput_summary.json``, the TP1 ratio and its corroboration from
``throughput_comparison.json``, the roofline share from its claim. Claims named ``agreement*`` or
``accuracy*`` (or any claim of a gate so named) become extra columns when a gate recorded them.

``summarize`` reads one candidate folder; ``history`` reads a candidate across the dated runs
beside a run; ``table``, ``to_csv`` and ``to_json`` print rows for ``python -m tp2qual compare``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tp2qual.candidate import GATES
from tp2qual.evidence.finding import (
    ERROR,
    FAILED,
    NOT_APPLICABLE,
    PASSED,
    Finding,
    Verdict,
    read_finding,
)
from tp2qual.evidence.layout import FINDING

EXTRA_PREFIXES = ("agreement", "accuracy")  # gates written beside this suite's own
SUMMARY, COMPARISON = "throughput_summary.json", "throughput_comparison.json"


@dataclass(frozen=True)
class Summary:
    """One candidate in one run, as numbers and words (None: not recorded)."""

    run_id: str
    candidate: str
    verdict: str
    gate: str = ""  # the gate that decided a verdict other than PASS
    cause: str = ""  # why, in one line
    decode_tok_s: float | None = None  # median, claimed
    decode_ci: tuple[float | None, float | None] = (None, None)
    ttft_s: float | None = None
    ttft_ci: tuple[float | None, float | None] = (None, None)
    tp1_ratio: float | None = None  # decode median / the TP1 baseline's
    tp1_corroborated: bool | None = None  # None: no baseline recorded
    tp1_date: str = ""
    roofline_share: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # agreement_* / accuracy_* claims
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


def extra_claims(finding: Finding) -> dict[str, Any]:
    """Claims of the gates written beside the suite's (agreement, accuracy), keyed
    ``group.claim``: the group is the gate so named, else the prefix the claim's name has."""
    found = {}
    for gate, claim in finding.claims():
        group = gate if gate.startswith(EXTRA_PREFIXES) else claim.name.split("_")[0]
        shown = not isinstance(claim.value, dict | list) and len(str(claim.value)) <= 60
        if group.startswith(EXTRA_PREFIXES) and shown:
            found[f"{group}.{claim.name}"] = claim.value
    return found


def _ci(stats: Any) -> tuple[float | None, float | None]:
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


def summary_of(
    finding: Finding, run_id: str, stats: Mapping[str, Any], comparison: Mapping[str, Any]
) -> Summary:
    """Pure: the row from a read finding, its throughput summary and its TP1 comparison."""
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
    return Summary(
        run_id=run_id,
        candidate=finding.candidate,
        verdict=finding.verdict or "INCOMPLETE",
        gate=gate,
        cause=cause,
        decode_tok_s=decode,  # an interval only beside a claimed median
        decode_ci=_ci(stats.get("decode_tok_s")) if decode is not None else (None, None),
        ttft_s=ttft,
        ttft_ci=_ci(stats.get("ttft_s")) if ttft is not None else (None, None),
        tp1_ratio=_number((rows.get("decode_tok_s_median") or {}).get("ratio")),
        tp1_corroborated=bool(comparison.get("corroborated")) if baseline else None,
        tp1_date=str(baseline.get("date") or ""),
        roofline_share=_number(roof),
        extra=extra_claims(finding),
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
    return summary_of(
        finding,
        run_dir.name,
        stats if isinstance(stats, Mapping) else {},
        comparison if isinstance(comparison, Mapping) else {},
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


# ---------------------------------------------------------------- printing rows


def cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def tp1_words(row: Summary) -> str:
    if row.tp1_corroborated is None:
        return "no baseline"
    how = "corroborated" if row.tp1_corroborated else "uncorroborated"
    return f"{how}, {row.tp1_date}" if row.tp1_date else how


def extra_columns(rows: Iterable[Summary]) -> list[str]:
    return sorted({k for r in rows for k in r.extra})


COLUMNS = (
    "run_id", "candidate", "verdict", "gate", "decode_tok_s", "decode_ci95", "ttft_s", "ttft_ci95",
    "tp1_ratio", "tp1_baseline", "roofline_share", "wall_s", "host",
)  # fmt: skip


def _pair(ci: tuple[float | None, float | None]) -> str:
    return "—" if None in ci else f"[{cell(ci[0])}, {cell(ci[1])}]"


def flat(row: Summary, extras: list[str]) -> dict[str, Any]:
    """The row as one flat record (CSV, the terminal): CIs split into low and high."""
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
        "tp1_ratio": row.tp1_ratio,
        "tp1_baseline": tp1_words(row),
        "roofline_share": row.roofline_share,
        **{k: row.extra.get(k) for k in extras},
        "wall_s": row.wall_s,
        "host": row.host,
        "cause": row.cause,
    }


def to_csv(rows: list[Summary]) -> str:
    extras = extra_columns(rows)
    records = [flat(r, extras) for r in rows]
    out = io.StringIO()
    if records:
        writer = csv.DictWriter(out, fieldnames=list(records[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: "" if v is None else v for k, v in r.items()} for r in records)
    return out.getvalue()


def to_json(rows: list[Summary]) -> str:
    return json.dumps([r.as_dict() for r in rows], indent=2, sort_keys=True) + "\n"


def table(rows: list[Summary]) -> list[str]:
    """Aligned columns for a terminal, the cause last so it may run long."""
    extras = extra_columns(rows)
    names = [*COLUMNS, *extras, "cause"]
    shown = [
        {k: cell(v) for k, v in flat(r, extras).items()}
        | {"gate": r.gate or "—", "decode_ci95": _pair(r.decode_ci), "ttft_ci95": _pair(r.ttft_ci)}
        for r in rows
    ]
    body = [[line[c] for c in names] for line in shown]
    widths = [
        max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(names)
    ]
    return [
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in [names, ["-" * w for w in widths], *body]
    ]
