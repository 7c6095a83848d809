"""Where another candidate's measured throughput comes from (a floor's measured basis, the
overview's ratios): its gate-08 samples, from the run the one rule names
(evidence/reference_rule.py): the run gate 07 takes the same reference's transcript from. This
run's PASS; none when it FAILED or ended in a suite ERROR here; else the newest earlier dated
PASS about the same bytes. The ``latest`` link is never read.

``THROUGHPUT_REFERENCE`` is the copy gate 08 keeps beside its own samples: the figures it judged
against and where they came from, so ``verify`` re-derives every floor from the candidate's own
folder (as gate 07 keeps its reference's transcript).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tp2qual.artifacts.claims import read_records
from tp2qual.artifacts.finding import CandidateRecord, read_finding
from tp2qual.artifacts.layout import read_json_object
from tp2qual.candidate import GATE_DEFAULTS, Candidate
from tp2qual.evidence.reference import prompt_set_sha256
from tp2qual.evidence.reference_rule import Chosen
from tp2qual.evidence.reference_runs import choose_run
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
    wanted: Candidate | None = None,
) -> MeasuredBasis | str:
    """``name``'s samples for ``role``, from the run the one rule names (the run gate 07 takes
    its transcript from; evidence/reference_rule.py), or why there are none. ``here``: its live
    record in this run; ``wanted``: its candidate file as it stands (its pins)."""
    chosen = choose_run(
        results_root, run_id, name, here=here, wanted=wanted, prompt_set=prompt_set_sha256()
    )
    return basis_in(results_root, chosen, role, here)


def basis_in(
    results_root: Path, chosen: Chosen, role: str, here: CandidateRecord | None = None
) -> MeasuredBasis | str:
    """The samples of the run ``chosen`` names, or why there are none: never another run's."""
    if chosen.run is None:
        return chosen.why
    name = chosen.name
    cand_dir = results_root / chosen.run / name
    samples = _samples(cand_dir)
    if not samples:
        where = f"this run ({chosen.run})" if chosen.this_run else f"run {chosen.run}"
        return f"reference {name!r} passed in {where} without throughput samples"
    if chosen.this_run and here is not None:
        settings = here.candidate.gate("throughput")
    else:
        finding = read_finding(cand_dir, cand_dir.parent)
        spec = finding.spec if finding is not None else {}
        settings = {
            **GATE_DEFAULTS["throughput"],
            **((spec.get("gates") or {}).get("throughput") or {}),
        }
    source = THIS_RUN if chosen.this_run else EARLIER
    return MeasuredBasis(role, name, chosen.run, source, samples, measurement(settings))


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
