"""A candidate against its reference in the overview: decode rate, TTFT and inter-token latency
as ratios to the reference's own gate-08 samples, each with a 95 % CI from the two sets of
samples (perf/comparison.py ``ratio_interval``).

The reference is ``[reference] candidate`` (a lane: its baseline). Its samples are those gate 08
copied beside the candidate's (``throughput_reference.json``: what its floors were judged
against, or why there were none), else those of the run gate 07 recorded, else of the run the
one rule names now (evidence/reference_rule.py, as gate 07 and gate 08 take it), so a run made
before gate 08 kept the copy still shows them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tp2qual.artifacts.claims import read_records
from tp2qual.artifacts.finding import FAILED, PASSED, Finding
from tp2qual.candidate import GATE_DEFAULTS
from tp2qual.evidence.reference import REFERENCE_IDENTITY
from tp2qual.evidence.reference_rule import Chosen
from tp2qual.evidence.reference_runs import choose_run, read_json
from tp2qual.evidence.throughput_reference import SAMPLES, basis_in, recorded_bases
from tp2qual.perf.comparison import ratio_interval
from tp2qual.perf.floor_basis import (
    REFERENCE,
    basis_names,
    measurement,
    mismatch,
    sample_rows,
)

# Ratio name -> the sample figure (perf/sampling.py): ITL is each request's median chunk gap.
RATIO_FIGURES = {"decode": "decode_tok_s", "ttft": "ttft_s", "itl": "itl_p50_s"}


@dataclass(frozen=True)
class ReferenceRatios:
    reference: str = ""  # the reference's name ("" when none is named)
    run: str = ""  # the run its samples come from
    where: str = ""  # "this run, <id>" / "run <id>", or why there are no ratios
    ratios: dict[str, dict[str, Any]] = field(default_factory=dict)  # RATIO_FIGURES keys

    def ratio(self, name: str) -> float | None:
        return (self.ratios.get(name) or {}).get("ratio")

    def interval(self, name: str) -> tuple[float | None, float | None]:
        found = self.ratios.get(name) or {}
        return found.get("low"), found.get("high")


def reference_ratios(run_dir: Path, cand_dir: Path, finding: Finding) -> ReferenceRatios:
    """The candidate's ratios to its reference, or the reference named with why there are none."""
    name = basis_names(finding.spec).get(REFERENCE)
    if not name:
        return ReferenceRatios(where="no reference named")
    result = finding.gates.get("throughput")
    outcome = result.outcome if result is not None else None
    if outcome not in (PASSED, FAILED):
        return ReferenceRatios(name, where=f"not measured here (throughput {outcome or 'not run'})")
    copied = recorded_bases(cand_dir)  # what gate 08 judged against, or why it had none
    basis = (
        copied[REFERENCE]
        if REFERENCE in copied
        else basis_in(run_dir.parent, judged_by(run_dir, cand_dir, name), REFERENCE)
    )
    if isinstance(basis, str):
        return ReferenceRatios(name, where=basis)
    own_settings = {**GATE_DEFAULTS["throughput"], **_throughput_spec(finding.spec)}
    if why := mismatch(measurement(own_settings), basis.settings):
        return ReferenceRatios(name, basis.run, f"{basis.where()}: {why}")
    own = _samples(cand_dir)
    ratios = {
        key: found
        for key, figure in RATIO_FIGURES.items()
        if (found := ratio_interval(_values(own, figure), _values(basis.samples, figure)))
    }
    return ReferenceRatios(name, basis.run, basis.where(), ratios)


def judged_by(run_dir: Path, cand_dir: Path, name: str) -> Chosen:
    """The run of ``name`` the candidate was judged against: the one gate 07 recorded (the one
    rule's choice that day, with that day's pins), else the rule applied now without pins."""
    recorded = read_json(cand_dir / REFERENCE_IDENTITY)
    if recorded.get("candidate") == name and recorded.get("run"):
        run = str(recorded["run"])
        return Chosen(name, run, this_run=run == run_dir.name)
    return choose_run(run_dir.parent, run_dir.name, name)


def _throughput_spec(spec: Mapping[str, Any]) -> Mapping[str, Any]:
    gates = spec.get("gates")
    found = gates.get("throughput") if isinstance(gates, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def _samples(cand_dir: Path) -> tuple[Mapping[str, Any], ...]:
    try:
        return sample_rows(read_records(cand_dir / SAMPLES))
    except (OSError, ValueError):
        return ()


def _values(samples: Sequence[Mapping[str, Any]], figure: str) -> list[float]:
    return [
        float(s[figure])
        for s in samples
        if isinstance(s.get(figure), int | float) and not isinstance(s.get(figure), bool)
    ]
