"""Re-verify a run folder: every artifact against the manifest, every claim against its artifact,
every functional verdict against the raw exchanges it was judged on.

The MLPerf submission checker's habit: a number in a finding is trusted only if it can be derived
again, now, from the raw artifact it names, and a verdict only if the checks re-run on the raw
requests and responses give it again (``rederive``, with the settings the run recorded at its
start). ``verify_run`` reads a run folder and returns every problem it finds — a tampered, missing
or unlisted file; a claim its artifact does not back; a verdict row or claim the raw exchanges do
not give; a passed gate whose claims or exchanges do not support a pass (or a failed one whose
show no failure); a PASS without backing; a verdict that its gates do not give (gate by gate:
``verify_gates``). No pytest here;
reading files is all it does.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tp2qual.artifacts.claims import Claim, DerivationError, derive_from, same, sha256_bytes
from tp2qual.artifacts.finding import ERROR, FAILED, PASSED, Finding, Outcome, Verdict
from tp2qual.artifacts.layout import FINDING, MANIFEST, NOT_HASHED, sha256_of
from tp2qual.candidate import GATES
from tp2qual.evidence.problem import Problem
from tp2qual.evidence.verify_gates import check_rederived
from tp2qual.evidence.verify_handover import check_handover
from tp2qual.evidence.verify_reference import check_reference_runs

__all__ = ["Problem", "Verification", "resolve_run", "verify_run"]

OUTCOMES = frozenset(str(o) for o in Outcome)


@dataclass
class Verification:
    run_dir: Path
    files: int = 0
    claims: int = 0
    candidates: int = 0
    final_manifest: bool = False
    seconds: float = 0.0
    problems: list[Problem] = field(default_factory=list)
    rechecked: Counter[str] = field(default_factory=Counter)  # gate -> raw exchanges re-checked
    rejudged: Counter[str] = field(default_factory=Counter)  # gate -> other raw records judged
    notes: list[Problem] = field(default_factory=list)  # failures that stand on their reason
    cuts: list[Problem] = field(default_factory=list)  # gates that stopped part-way, and where
    rehashed: bool = False
    sentences: dict[str, str] = field(default_factory=dict)  # candidate -> its PASS's sentence

    @property
    def ok(self) -> bool:
        return not self.problems

    def passes(self) -> list[str]:
        """Each PASS with its one sentence, as verify built it again: printed above the summary."""
        return [f"{name}: {said}" for name, said in self.sentences.items()]

    def summary(self) -> str:
        state = "OK" if self.ok else f"{len(self.problems)} problem(s)"
        note = "" if self.final_manifest else " (manifest written before the run finished)"
        counts = ", ".join(f"{gate} {n}" for gate, n in self.rechecked.items())
        rechecked = f"; raw exchanges re-checked: {counts}" if counts else ""
        records = ", ".join(f"{gate} {n}" for gate, n in self.rejudged.items())
        rejudged = f"; other raw records re-judged: {records}" if records else ""
        rehashed = "; model bytes re-hashed" if self.rehashed else ""
        alone = f"; {len(self.notes)} failure(s) stand on their reason alone" if self.notes else ""
        alone += "".join(f"; {p.where.split('/')[0]}: {p.detail}" for p in self.cuts)
        return (
            f"verify {self.run_dir.name}: {state} — {self.candidates} candidate(s), "
            f"{self.files} file(s), {self.claims} claim(s) in {self.seconds:.2f}s{note}"
            f"{rechecked}{rejudged}{rehashed}{alone}"
        )


def resolve_run(path: Path) -> Path:
    """A run folder, ``results/latest``, or a results folder (meaning its latest run)."""
    if not (path / MANIFEST).exists() and (path / "latest").is_dir():
        path = path / "latest"
    return path.resolve()


def verify_run(path: Path, *, rehash: bool = False) -> Verification:
    """``rehash``: hash the model's bytes again (``identity/model.json`` names the files) instead
    of trusting the digests preflight recorded."""
    began = time.monotonic()
    run_dir = resolve_run(path)
    result = Verification(run_dir, rehashed=rehash)
    listed = _load_manifest(run_dir, result)
    result.problems += check_files(run_dir, listed)
    result.problems += check_handover(run_dir)
    result.files = len(listed)
    for cand_dir in candidate_dirs(run_dir, listed):
        result.candidates += 1
        result.problems += check_candidate(run_dir, cand_dir, listed, result)
    if not result.candidates:
        result.problems.append(Problem("finding", ".", "no candidate finding in this run"))
    result.seconds = time.monotonic() - began
    return result


def _load_manifest(run_dir: Path, result: Verification) -> dict[str, dict[str, Any]]:
    try:
        body = json.loads((run_dir / MANIFEST).read_text())
    except FileNotFoundError:
        result.problems.append(Problem("manifest", MANIFEST, "missing: nothing can be verified"))
        return {}
    except ValueError as exc:
        result.problems.append(Problem("manifest", MANIFEST, f"unreadable: {exc}"))
        return {}
    result.final_manifest = bool(body.get("final"))
    return dict(body.get("files", {}))


def check_files(run_dir: Path, listed: dict[str, dict[str, Any]]) -> list[Problem]:
    """Each listed file present with its sha256 and size; no file outside the manifest."""
    problems = []
    for rel, entry in sorted(listed.items()):
        path = run_dir / rel
        if not path.is_file():
            problems.append(Problem("missing", rel, "listed in the manifest, not on disk"))
        elif sha256_of(path) != entry.get("sha256"):
            sizes = f"{path.stat().st_size} bytes now, {entry.get('bytes')} then"
            problems.append(Problem("tampered", rel, f"sha256 differs from the manifest ({sizes})"))
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if _hashable(path) and rel not in listed:
            problems.append(Problem("unlisted", rel, "on disk but not in the manifest"))
    return problems


def _hashable(path: Path) -> bool:
    return (
        path.is_file()
        and not path.is_symlink()
        and path.name not in NOT_HASHED
        and not path.name.endswith(".tmp")
    )


def candidate_dirs(run_dir: Path, listed: dict[str, dict[str, Any]]) -> list[Path]:
    """Candidate folders: those with a finding on disk or in the manifest."""
    names = {p.parent.name for p in run_dir.glob(f"*/{FINDING}")}
    names |= {
        rel.split("/")[0] for rel in listed if rel.count("/") == 1 and rel.endswith("/" + FINDING)
    }
    return [run_dir / name for name in sorted(names)]


def check_candidate(
    run_dir: Path, cand_dir: Path, listed: dict[str, dict[str, Any]], result: Verification
) -> list[Problem]:
    where = f"{cand_dir.name}/{FINDING}"
    try:
        finding = Finding.read(cand_dir / FINDING)
    except (OSError, ValueError) as exc:
        return [Problem("finding", where, f"unreadable: {exc}")]
    problems = check_verdict(finding, where) + check_backing(finding, where)
    problems += check_sentence(run_dir, cand_dir.name, finding, where, result)
    problems += check_suite_errors(cand_dir, finding, where)
    problems += check_reference_runs(run_dir, cand_dir, where)
    if finding.run_id != run_dir.name:
        problems.append(
            Problem("finding", where, f"belongs to run {finding.run_id!r}, not {run_dir.name!r}")
        )
    for gate, claim in finding.claims():
        result.claims += 1
        problem = check_claim(cand_dir, claim, listed)
        if problem:
            problems.append(Problem(problem[0], f"{where} [{gate}.{claim.name}]", problem[1]))
    return problems + check_rederived(cand_dir, finding, where, result)


def check_verdict(finding: Finding, where: str) -> list[Problem]:
    """The verdict and failed gate the finding states must be what its gates give."""
    outcomes = {finding.gates[g].outcome for g in GATES}
    problems = [
        Problem("finding", where, f"unknown gate outcome {o!r}")
        for o in sorted(outcomes - OUTCOMES)
    ]
    if finding.finished is None:
        return [*problems, Problem("finding", where, "no 'finished' field: verdict unprovable")]
    expected = finding.derived_verdict()
    if finding.verdict != expected:
        problems.append(
            Problem(
                "verdict",
                where,
                f"states {finding.verdict or 'no verdict'} but its gates give {expected}",
            )
        )
    for field_name, stated, outcome in (
        ("failed_gate", finding.failed_gate, FAILED),
        ("suite_error_gate", finding.suite_error_gate, ERROR),
    ):
        if stated != (first := finding.first(outcome)):
            problems.append(
                Problem("verdict", where, f"names {field_name} {stated!r}; its gates say {first!r}")
            )
    return problems


def check_sentence(
    run_dir: Path, name: str, finding: Finding, where: str, result: Verification
) -> list[Problem]:
    """A PASS's one sentence (artifacts/pass_sentence.py) built again from its gates: the one
    the summary prints, and the one the finding states (an older finding states none)."""
    said = finding.pass_sentence(run_dir)
    if said is None:
        return []
    result.sentences[name] = said
    if finding.stated_sentence is None or finding.stated_sentence == said:
        return []
    detail = f"states {finding.stated_sentence!r}; its gates give {said!r}"
    return [Problem("finding", where, detail)]


def check_suite_errors(cand_dir: Path, finding: Finding, where: str) -> list[Problem]:
    """A suite error keeps its traceback: the gate names the artifact and it is on disk."""
    return [
        Problem("finding", where, f"suite error in {gate} without its traceback artifact")
        for gate, result in finding.gates.items()
        if result.outcome == ERROR
        and not (result.error_artifact and (cand_dir / result.error_artifact).is_file())
    ]


def check_backing(finding: Finding, where: str) -> list[Problem]:
    """A PASS rests on claims: every passed gate has one and every claim names an artifact."""
    if finding.verdict != Verdict.PASS:
        return []
    problems = []
    for gate, result in finding.gates.items():
        if result.outcome == PASSED and not result.claims:
            problems.append(Problem("unbacked", where, f"PASS, but gate {gate} has no claim"))
        problems += [
            Problem("unbacked", where, f"PASS, but claim {gate}.{c.name} names no artifact")
            for c in result.claims
            if not c.artifact
        ]
    return problems


def check_claim(
    cand_dir: Path, claim: Claim, listed: dict[str, dict[str, Any]]
) -> tuple[str, str] | None:
    """(kind, detail) when the claim is not backed by the bytes it was derived from."""
    artifact = claim.artifact
    if not artifact:
        return None  # reported by check_backing / check_verdict
    path = (cand_dir / artifact).resolve()
    if not path.is_relative_to(cand_dir.resolve()):
        return "claim", f"artifact {artifact!r} lies outside the candidate's folder"
    if not path.is_file():
        return "missing", f"artifact {artifact} is not on disk"
    if f"{cand_dir.name}/{artifact}" not in listed:
        return "unlisted", f"artifact {artifact} is not in the manifest"
    return _check_claim_bytes(path, artifact, claim)


def _check_claim_bytes(path: Path, artifact: str, claim: Claim) -> tuple[str, str] | None:
    if not claim.sha256 or claim.bytes is None:
        return "claim", f"no sha256/bytes of {artifact} recorded at claim time"
    data = path.read_bytes()
    prefix = data[: claim.bytes]
    if len(data) < claim.bytes or sha256_bytes(prefix) != claim.sha256:
        return "tampered", f"{artifact} no longer holds the bytes the claim was derived from"
    try:
        derived = derive_from(prefix, path, claim.derive)
    except DerivationError as exc:
        return "claim", f"not found in {artifact}: {exc}"
    if not same(claim.value, derived):
        return "claim", f"claims {claim.value!r}, {artifact} gives {derived!r}"
    return None
