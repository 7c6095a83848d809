"""verify: the run a candidate's reference was taken from is the one rule's
(evidence/reference_rule.py), and gate 07 and gate 08 took the same one.

Gate 07 records its reference's run in ``identity/reference.json``; gate 08 copies the samples
its floors rest on, with their run, into ``throughput_reference.json``. Each is re-derived from
its own copy, so without this check a candidate judged against one run's transcript and another
run's throughput would verify. The rule is applied again with what the run folder holds: the
reference's own record in this run (a FAIL or ERROR there vetoes any earlier run), and the
earlier runs the gates recorded, taken as the PASSes about the same bytes they were then (the
pins of that day are not this folder's to re-judge).
"""

from __future__ import annotations

from pathlib import Path

from tp2qual.evidence.problem import Problem
from tp2qual.evidence.reference import REFERENCE_IDENTITY
from tp2qual.evidence.reference_rule import Chosen, RunSeen, Standing, choose_reference
from tp2qual.evidence.reference_runs import read_json, seen_here
from tp2qual.evidence.throughput_reference import recorded_bases
from tp2qual.perf.floor_basis import MeasuredBasis

GATE_07 = "gate 07's transcript"


def recorded_runs(cand_dir: Path) -> dict[str, tuple[str, str]]:
    """Who took which run of which reference: ``{who: (candidate, run)}``, as recorded."""
    found: dict[str, tuple[str, str]] = {}
    identity = read_json(cand_dir / REFERENCE_IDENTITY)
    if identity.get("candidate") and identity.get("run"):
        found[GATE_07] = (str(identity["candidate"]), str(identity["run"]))
    for role, basis in recorded_bases(cand_dir).items():
        if isinstance(basis, MeasuredBasis) and basis.candidate and basis.run:
            found[f"gate 08's {role.replace('_', ' ')} floors"] = (basis.candidate, basis.run)
    return found


def rule_again(run_dir: Path, name: str, runs: set[str]) -> Chosen:
    """The rule on what the run folder holds: ``name``'s record in this run, and the earlier
    ``runs`` the gates recorded, as PASSes, newest first."""
    here = seen_here(None, run_dir / name, run_dir.name)
    earlier = [RunSeen(r, Standing.PASS) for r in sorted(runs - {run_dir.name}, reverse=True)]
    return choose_reference(name, here, earlier, str(run_dir.parent))


def check_reference_runs(run_dir: Path, cand_dir: Path, where: str) -> list[Problem]:
    """A problem where the gates took one reference from different runs, or from a run the
    one rule does not name (an earlier PASS in place of this run's FAIL)."""
    named = recorded_runs(cand_dir)
    problems = []
    for name in sorted({candidate for candidate, _ in named.values()}):
        runs = {who: run for who, (candidate, run) in named.items() if candidate == name}
        said = "; ".join(f"{who}: run {run}" for who, run in sorted(runs.items()))
        if len(set(runs.values())) > 1:
            detail = f"{name!r} taken from different runs ({said}); one rule names one run"
            problems.append(Problem("reference", where, detail))
            continue
        expected = rule_again(run_dir, name, set(runs.values()))
        if expected.run not in runs.values():
            rule = f"run {expected.run}" if expected.run else f"none: {expected.why}"
            detail = f"{name!r} taken from another run than the one rule names ({said}); "
            detail += f"it names {rule}"
            problems.append(Problem("reference", where, detail))
    return problems
