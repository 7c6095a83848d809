"""Where another candidate's measured throughput comes from (a floor's measured basis, the
overview's ratios): its gate-08 samples, taken only from a finding whose verdict is PASS —
this run's (it ran earlier in it and every gate passed), else the newest earlier dated run
under the results folder that holds one. Run folders are named by their start time, so
"earlier" is a name before this run's; the ``latest`` link is never read.

``THROUGHPUT_REFERENCE`` is the copy gate 08 keeps beside its own samples: the figures it judged
against and where they came from, so ``verify`` re-derives every floor from the candidate's own
folder (as gate 07 keeps its reference's transcript).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tp2qual.artifacts.claims import read_records
from tp2qual.artifacts.finding import (
    CandidateRecord,
    Finding,
    Verdict,
    derive_verdict,
    read_finding,
    unbacked,
)
from tp2qual.artifacts.layout import FINDING, read_json_object
from tp2qual.candidate import GATE_DEFAULTS
from tp2qual.perf.floor_basis import THIS_RUN, MeasuredBasis, measurement, sample_rows

SAMPLES = "throughput_samples.jsonl"
THROUGHPUT_REFERENCE = "throughput_reference.json"
EARLIER = "an earlier run"


def measured_basis(
    results_root: Path,
    run_id: str,
    role: str,
    name: str,
    here: CandidateRecord | None = None,
) -> MeasuredBasis | str:
    """``name``'s samples for ``role``: from ``here`` (its record in this run, while the run is
    under way) or this run's folder, else the newest earlier dated run; or why there are none."""
    found = _in_record(here, role, run_id) if here is not None else None
    found = found or _in_folder(results_root / run_id, role, name, THIS_RUN, settled=True)
    for run_dir in _earlier_runs(results_root, run_id, name):
        if found:
            break
        found = _in_folder(run_dir, role, name, EARLIER, settled=False)
    return found or (
        f"{name} has no PASS with throughput samples in this run ({run_id}) or an earlier "
        f"dated run under {results_root}"
    )


def _in_record(record: CandidateRecord, role: str, run_id: str) -> MeasuredBasis | None:
    if record.verdict(settled=True) != Verdict.PASS:
        return None
    samples = _samples(record.evidence.root)
    settings = record.candidate.gate("throughput")
    return (
        MeasuredBasis(role, record.candidate.name, run_id, THIS_RUN, samples, measurement(settings))
        if samples
        else None
    )


def _in_folder(
    run_dir: Path, role: str, name: str, source: str, *, settled: bool
) -> MeasuredBasis | None:
    """A run folder's PASS of ``name`` with samples. ``settled``: this run's, whose finding says
    INCOMPLETE until the session ends, is read as it stands once its gates all ran."""
    finding = read_finding(run_dir / name, run_dir)
    if finding is None or not _passed(finding, settled=settled):
        return None
    samples = _samples(run_dir / name)
    if not samples:
        return None
    settings = {
        **GATE_DEFAULTS["throughput"],
        **((finding.spec.get("gates") or {}).get("throughput") or {}),
    }
    return MeasuredBasis(role, name, run_dir.name, source, samples, measurement(settings))


def _passed(finding: Finding, *, settled: bool) -> bool:
    if not settled:
        return finding.verdict == Verdict.PASS
    gates = finding.gates.values()
    return (
        derive_verdict(
            {g.outcome for g in gates},
            finished=True,
            unbacked_claims=unbacked((g.outcome, [c.artifact for c in g.claims]) for g in gates),
        )
        == Verdict.PASS
    )


def _earlier_runs(results_root: Path, run_id: str, name: str) -> Iterator[Path]:
    """Dated run folders before ``run_id`` holding ``name``'s finding, newest first."""
    if not results_root.is_dir():
        return iter(())
    runs = [
        p
        for p in results_root.iterdir()
        if p.is_dir() and not p.is_symlink() and p.name < run_id and (p / name / FINDING).is_file()
    ]
    return iter(sorted(runs, key=lambda p: p.name, reverse=True))


def _samples(cand_dir: Path) -> tuple[Mapping[str, Any], ...]:
    path = cand_dir / SAMPLES
    if not path.is_file():
        return ()
    try:
        return sample_rows(read_records(path))
    except (OSError, ValueError):
        return ()  # unreadable: not a basis (verify reports the damaged run itself)


def recorded_bases(cand_dir: Path) -> dict[str, MeasuredBasis | str]:
    """The measured bases gate 08 copied beside its samples (``THROUGHPUT_REFERENCE``), by
    role; a role gate 08 found none for keeps its one-line reason."""
    data = read_json_object(cand_dir / THROUGHPUT_REFERENCE)
    out: dict[str, MeasuredBasis | str] = {}
    for role, entry in data.items():
        if isinstance(entry, Mapping) and "samples" in entry:
            out[role] = MeasuredBasis.from_dict(entry)
        elif isinstance(entry, Mapping):
            out[role] = str(entry.get("none") or "not recorded")
    return out


def as_record(bases: Mapping[str, MeasuredBasis | str]) -> dict[str, Any]:
    """``THROUGHPUT_REFERENCE``'s content: each role's copied samples, or why there are none."""
    return {
        role: basis.as_dict() if isinstance(basis, MeasuredBasis) else {"none": basis}
        for role, basis in bases.items()
    }
