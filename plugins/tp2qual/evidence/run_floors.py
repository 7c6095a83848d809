"""A candidate's floors as they stand in a run under way, so that gate 08 judges, and every
gate's request budget follows, the same floors: the bases (the TP1 comparison, the roofline,
the measured figures of its reference or lane baseline) read once from this run's evidence,
then perf/floors.py."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tp2qual.artifacts.finding import CandidateRecord, read_finding
from tp2qual.evidence.run import RunState
from tp2qual.evidence.throughput_reference import measured_basis
from tp2qual.perf.comparison import compare_baseline, roofline_for
from tp2qual.perf.floor_basis import MeasuredBasis, basis_names, roles_used
from tp2qual.perf.floors import Floor, FloorSet, budget_floor, judged_floors


@dataclass(frozen=True)
class RunBases:
    comparison: dict[str, Any]
    roofline: dict[str, Any]
    measured: dict[str, MeasuredBasis | str]

    def floors(self, settings: Mapping[str, Any]) -> FloorSet:
        return judged_floors(settings, self.comparison, self.roofline, self.measured)


def measured_bases(state: RunState, record: CandidateRecord) -> dict[str, MeasuredBasis | str]:
    """The measured bases the candidate's derived floors ask for, each found or said missing."""
    candidate = record.candidate
    names = basis_names(candidate.spec)
    files = {c.name: c for c in state.candidates}
    found: dict[str, MeasuredBasis | str] = {}
    for role in roles_used(candidate.gate("throughput")):
        name = names.get(role)
        if not name:
            found[role] = f"no {role.replace('_', ' ')} named"
            continue
        here, wanted = state.records.get(name), files.get(name)
        found[role] = measured_basis(state.results_root, state.run_id, role, name, here, wanted)
    return found


def run_bases(
    state: RunState,
    record: CandidateRecord,
    summary: Mapping[str, Mapping[str, float]] | None = None,
) -> RunBases:
    """Every basis, with this run's throughput ``summary`` where gate 08 has one (the TP1
    comparison's ratios and the roofline's measured fraction need it; the floors do not)."""
    candidate = record.candidate
    summary = summary or {}
    baseline = candidate.spec.get("baseline")
    recorded = read_finding(baseline.get("finding"), record.evidence.root) if baseline else None
    decode = (summary.get("decode_tok_s") or {}).get("median")
    roof = roofline_for(
        candidate.model, candidate.gpus, record.identity.get("topology"), candidate.tp, decode
    )
    return RunBases(
        compare_baseline(summary, baseline, recorded), roof, measured_bases(state, record)
    )


def request_floor(state: RunState, record: CandidateRecord) -> Floor | None:
    """The decode floor the candidate's requests are budgeted by (budget.py), as gate 08 would
    judge it now; None when it has none."""
    return budget_floor(run_bases(state, record).floors(record.candidate.gate("throughput")))


def not_derivable_before_start(
    state: RunState, record: CandidateRecord, selected: set[str]
) -> list[str]:
    """The floors that cannot be derived in this run, known before the candidate starts: its
    bases as they stand (earlier runs, this run so far), a measured basis counted as coming
    when the candidate it names is ``selected`` to run before it. What a caller refuses the
    candidate with, as a suite error rather than its FAIL."""
    bases = run_bases(state, record)
    names = basis_names(record.candidate.spec)
    coming = {
        role
        for role, found in bases.measured.items()
        if isinstance(found, str) and names.get(role) in selected
    }
    missing = bases.floors(record.candidate.gate("throughput")).not_derived
    return [line for line in missing if not any(f"(of {role})" in line for role in coming)]
