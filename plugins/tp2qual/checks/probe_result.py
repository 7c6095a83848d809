"""Read the collective probe's final line (``TP2QUAL_PROBE_REPORT {json}``, written by
``serving/nccl_probe.py``) and decide whether it proves the ranks' all-reduce works.

The probe all-reduces buffers of several sizes and dtypes, filled by rank and position, with an
exact expected sum per element and reports, per case, ok, where a rank's wrong elements are
(how many, the first and last, what the first held) and the nccl-tests figures (seconds, algbw,
busbw in GB/s). This module turns that
line into typed facts a gate can claim from, and judges them: every rank of ``tp`` reported,
every case summed right on every rank, and no timeout. Pure: text in, frozen dataclasses out;
a missing or malformed line is one clear ``ProbeReportError``, never a traceback.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from tp2qual.checks.verdict import Verdict

REPORT_TAG = "TP2QUAL_PROBE_REPORT "  # the same literal as serving/nccl_probe.REPORT_TAG
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class ProbeReportError(ValueError):
    """The probe's output holds no usable report line (a suite or launch problem to show)."""


@dataclass(frozen=True)
class WrongElements:
    """Where one rank's sum of one case is wrong: how many elements, the first and the last,
    and what the first held against what it should."""

    rank: int
    count: int
    first: int | None = None
    last: int | None = None
    found: float | None = None
    expected: float | None = None


@dataclass(frozen=True)
class Case:
    """One all-reduce size and dtype over all ranks; figures only when every rank ran it."""

    dtype: str
    bytes: int
    ok: bool
    ranks: int
    seconds: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    error: str | None = None
    wrong: tuple[WrongElements, ...] = ()


@dataclass(frozen=True)
class ProbeReport:
    """The facts of one probe run."""

    ok: bool
    backend: str
    nprocs: int
    timed_out: bool
    wall_s: float
    cases: tuple[Case, ...]
    ranks_ok: tuple[int, ...]
    rank_errors: dict[int, str]
    versions: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: what a gate records and claims from."""
        out = asdict(self)
        out["rank_errors"] = {str(k): v for k, v in sorted(self.rank_errors.items())}
        return out


def parse_report(text: str) -> ProbeReport:
    """The last ``TP2QUAL_PROBE_REPORT`` line of the probe's output, typed."""
    lines = [_ANSI.sub("", ln).rstrip("\r") for ln in text.splitlines()]
    tagged = [ln[len(REPORT_TAG) :] for ln in lines if ln.startswith(REPORT_TAG)]
    if not tagged:
        raise ProbeReportError(
            f"the probe printed no '{REPORT_TAG.strip()}' line: it did not run to its end"
            " (see its output for why)"
        )
    try:
        raw = json.loads(tagged[-1])
        return _typed(raw)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ProbeReportError(
            f"the probe's '{REPORT_TAG.strip()}' line is malformed ({type(exc).__name__}: {exc})"
        ) from None


def _typed(raw: dict[str, Any]) -> ProbeReport:
    if not isinstance(raw, dict):
        raise TypeError("not a JSON object")
    ranks = raw["ranks"]
    versions = {}
    for key in ("torch", "nccl"):
        found = sorted({str(r[key]) for r in ranks if r.get(key)})
        if found:
            versions[key] = ", ".join(found)
    return ProbeReport(
        ok=bool(raw["ok"]),
        backend=str(raw["backend"]),
        nprocs=int(raw["nprocs"]),
        timed_out=bool(raw["timed_out"]),
        wall_s=float(raw["wall_s"]),
        cases=tuple(_case(c) for c in raw["cases"]),
        ranks_ok=tuple(int(r["rank"]) for r in ranks if r.get("ok")),
        rank_errors={int(r["rank"]): str(r["error"]) for r in ranks if r.get("error")},
        versions=versions,
    )


def _case(c: dict[str, Any]) -> Case:
    return Case(
        dtype=str(c["dtype"]),
        bytes=int(c["bytes"]),
        ok=bool(c["ok"]),
        ranks=int(c["ranks"]),
        seconds=_number(c, "seconds"),
        algbw_gbps=_number(c, "algbw_gbps"),
        busbw_gbps=_number(c, "busbw_gbps"),
        error=str(c["error"]) if c.get("error") else None,
        wrong=tuple(_wrong(w) for w in c.get("wrong") or []),
    )


def _wrong(w: dict[str, Any]) -> WrongElements:
    first, last = _number(w, "first_wrong"), _number(w, "last_wrong")
    return WrongElements(
        rank=int(w["rank"]),
        count=int(w["wrong_elements"]),
        first=None if first is None else int(first),
        last=None if last is None else int(last),
        found=_number(w, "found"),
        expected=_number(w, "expected"),
    )


def _number(entry: dict[str, Any], key: str) -> float | None:
    return float(entry[key]) if entry.get(key) is not None else None


def check_report(report: ProbeReport, *, tp: int, backend: str) -> Verdict:
    """Pass iff the probe ran ``tp`` ranks on ``backend``, every rank finished ok, and every
    case summed right on every rank, with its figures."""
    problems = []
    if report.backend != backend:
        problems.append(f"the probe ran backend {report.backend}, the engine uses {backend}")
    if report.nprocs != tp:
        problems.append(f"the probe ran {report.nprocs} rank(s), expected {tp}")
    if report.timed_out:
        problems.append(f"the probe timed out after {report.wall_s:g} s")
    missing = sorted(set(range(tp)) - set(report.ranks_ok))
    if missing:
        said = "; ".join(f"rank {r}: {e}" for r, e in sorted(report.rank_errors.items()))
        problems.append(f"rank(s) {missing} did not finish ok" + (f" ({said})" if said else ""))
    if not report.cases:
        problems.append("the probe ran no all-reduce case")
    bad = [c for c in report.cases if not c.ok or c.busbw_gbps is None]
    for c in bad:
        why = c.error or f"{c.ranks} of {tp} rank(s) ran it"
        problems.append(f"all_reduce {c.dtype} {c.bytes} B failed: {why}")
    measures = report.to_dict()
    if problems:
        return Verdict.failed("; ".join(problems), **measures)
    return Verdict.passed(**measures)
