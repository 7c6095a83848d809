"""Which dated record a candidate's planned time rests on, and its rates (issue 39).

A candidate's own ``[baseline]`` record is of its own TP size (test_baseline_tp.py): a TP2 serve
rests on the TP2 record, a TP1 reference on the TP1 record. Where that record has no decode
rate (the user's Nemotron and Laguna TP1 records are aggregate rates only), the same model's
record at the other TP size stands in, converted by the user's own TP2-over-TP1 measurement on
these cards (``[campaign] tp2_gain_max``):

- a TP1 serve from its TP2 record: decode divided by the largest TP2 decode gain measured,
  times to first output multiplied by the largest TP2 prefill gain (the slowest TP1 those gains
  allow);
- a TP2 serve from its TP1 record: the TP1 rates as they are (TP2 was never slower at c1).

Where neither exists the caller falls back to the floor, and says so. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tp2qual.candidate import Candidate
from tp2qual.perf.estimate import Rate, dated_rate
from tp2qual.perf.prefill import PrefillRow, rows_of, scaled

DECODE = "decode_tok_s_median"
TTFT = "ttft_s_median"


@dataclass(frozen=True)
class Rested:
    """The record a plan rests on, converted to the candidate's TP size where it is another's."""

    decode: Rate
    first_token: Rate | None  # at most, per short request
    prefill: tuple[PrefillRow, ...]
    prefill_basis: str
    record: Mapping[str, Any]  # the [baseline] used
    owner: str  # the candidate whose file holds it
    converted: str  # "" when of the candidate's own TP size, else how it was converted
    how: str = ""  # the conversion in short (``converted`` less its source)

    def words(self) -> str:
        """The record in one line: TP size, date, protocol, source (and its owner, converted)."""
        record = self.record
        protocol = str((record.get("definitions") or {}).get(DECODE, "")).split(", ")[0]
        source = str(record.get("source", "no source")).split(" (")[0]
        said = f"TP{record.get('tp', '?')} record of {record.get('date', '?')}"
        said += f" ({protocol or 'no protocol stated'}; {source})"
        return f"{self.owner}'s {said}, converted: {self.how}" if self.converted else said


def rested_on(candidate: Candidate, others: Mapping[str, Candidate]) -> Rested | None:
    """The candidate's own TP record with a decode rate, else its model's other-TP record
    converted, else None."""
    own = candidate.spec.get("baseline")
    if dated_rate(own, DECODE) is not None:
        return _rested(candidate, candidate, 1.0, 1.0, "")
    for other in _same_model(candidate, others):
        record = other.spec.get("baseline") or {}
        if dated_rate(record, DECODE) is None or record.get("tp") == candidate.tp:
            continue
        return _converted(candidate, other)
    return None


def _same_model(candidate: Candidate, others: Mapping[str, Candidate]) -> list[Candidate]:
    """The run's candidates judged against this one or named as its reference (a TP1 reference
    and its TP2 serve: the same checkpoint, image and flags)."""
    return [
        c
        for c in others.values()
        if c.name != candidate.name
        and (c.reference == candidate.name or candidate.reference == c.name)
    ]


def _converted(candidate: Candidate, other: Candidate) -> Rested:
    record = other.spec["baseline"]
    if candidate.tp > int(record.get("tp") or 0):
        why = f"TP2 was never slower than TP1 at c1: the TP{record.get('tp')} rates as they are"
        return _rested(candidate, other, 1.0, 1.0, why)
    gain = (candidate.spec.get("campaign") or {}).get("tp2_gain_max") or {}
    decode, prefill = float(gain.get("decode") or 1.0), float(gain.get("prefill") or 1.0)
    why = (
        f"its own TP{candidate.tp} record has no decode rate: decode / {decode:g} and times to "
        f"first output x {prefill:g} (the largest TP2 gains the user measured, [campaign] "
        "tp2_gain_max)"
    )
    said = f"{why}: {gain.get('source', 'no source stated')}"
    return _rested(candidate, other, decode, prefill, why, said)


def _rested(
    candidate: Candidate,
    owner: Candidate,
    slower: float,
    later: float,
    why: str,
    said: str = "",
) -> Rested:
    """``why``: how the record was converted, in short; ``said``: the same with its source."""
    record = owner.spec["baseline"]
    decode = dated_rate(record, DECODE)
    assert decode is not None  # rested_on chose a record with one
    first = _first_output(record, rows_of(record))
    rows = scaled(rows_of(record), later)
    came = f"{why}; " if why else ""
    own = f"{owner.name}'s " if owner is not candidate else ""
    return Rested(
        decode=Rate(decode.value / slower, f"{said or why}; {own}{decode.basis}".lstrip("; ")),
        first_token=first and Rate(first.value * later, f"{came}{own}{first.basis}"),
        prefill=rows,
        prefill_basis=f"{came}{own}[baseline] prefill" if rows else "",
        record=record,
        owner=owner.name,
        converted=said or why,
        how=why,
    )


def _first_output(record: Mapping[str, Any], rows: tuple[PrefillRow, ...]) -> Rate | None:
    """At most per short request: the record's smallest prefill row (a short prompt takes no
    longer), else its TTFT figure (which may include reasoning already counted as decode)."""
    if rows:
        where = f"TP{record.get('tp', '?')} record of {record.get('date', '?')}"
        return Rate(rows[0].seconds, f"the dated {where}'s smallest prefill row, {rows[0].words()}")
    return dated_rate(record, TTFT)
