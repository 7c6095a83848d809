"""Re-verify a run folder: every artifact against the manifest, every claim against its artifact,
every functional verdict against the raw exchanges it was judged on.

The MLPerf submission checker's habit: a number in a finding is trusted only if it can be derived
again, now, from the raw artifact it names, and a verdict only if the checks re-run on the raw
requests and responses give it again (``rederive``, with the settings the run recorded at its
start). ``verify_run`` reads a run folder and returns every problem it finds — a tampered, missing
or unlisted file; a claim its artifact does not back; a verdict row or claim the raw exchanges do
not give; a passed gate whose claims or exchanges do not support a pass (or a failed one whose
show no failure); a PASS without backing; a verdict that its gates do not give. No pytest here;
reading files is all it does.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tp2qual.candidate import GATES
from tp2qual.evidence.claims import Claim, DerivationError, derive_from, same, sha256_bytes
from tp2qual.evidence.finding import ERROR, FAILED, PASSED, Finding, Outcome, Verdict
from tp2qual.evidence.layout import FINDING, MANIFEST, NOT_HASHED, sha256_of
from tp2qual.evidence.rederive import (
    REDERIVERS,
    RESOLVED_CANDIDATE,
    GateRun,
    Rederived,
    Unrederivable,
    read_settings,
    supports_pass,
)
from tp2qual.evidence.rederive.startup import READINESS, startup

OUTCOMES = frozenset(str(o) for o in Outcome)


@dataclass(frozen=True)
class Problem:
    # tampered | missing | unlisted | manifest | finding | claim | unbacked | verdict
    # | rederive (the raw exchanges give another value) | unsupported (outcome vs evidence)
    # | note (not a problem: a failure that stands on its reason alone)
    kind: str
    where: str  # path relative to the run folder
    detail: str

    def line(self) -> str:
        return f"{self.kind.upper():<9} {self.where}: {self.detail}"


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
    rehashed: bool = False

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        state = "OK" if self.ok else f"{len(self.problems)} problem(s)"
        note = "" if self.final_manifest else " (manifest written before the run finished)"
        counts = ", ".join(f"{gate} {n}" for gate, n in self.rechecked.items())
        rechecked = f"; raw exchanges re-checked: {counts}" if counts else ""
        records = ", ".join(f"{gate} {n}" for gate, n in self.rejudged.items())
        rejudged = (f"; other raw records re-judged: {records}" if records else "")
        rehashed = "; model bytes re-hashed" if self.rehashed else ""
        alone = f"; {len(self.notes)} failure(s) stand on their reason alone" if self.notes else ""
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
    problems += check_suite_errors(cand_dir, finding, where)
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


def check_rederived(
    cand_dir: Path, finding: Finding, where: str, result: Verification
) -> list[Problem]:
    """Every gate that ran is judged again from its raw records, with the recorded settings;
    its verdict rows, claims and checks must be what that gives, and its outcome what they
    support."""
    ran = [g for g, r in finding.gates.items() if r.outcome in (PASSED, FAILED)]
    if not ran:
        return []
    try:
        resolved = with_fallbacks(read_settings(cand_dir), finding)
    except Unrederivable as exc:
        return [Problem("rederive", f"{cand_dir.name}/{RESOLVED_CANDIDATE}", str(exc))]
    problems = []
    for gate in ran:
        settings = resolved["gates"].get(gate) or {}
        got = None
        if gate in REDERIVERS:
            got, problem = _rederive(cand_dir, gate, settings, resolved, result.rehashed)
            if problem and finding.gates[gate].outcome == FAILED and not got.records:
                # failed before its raw records were written: its start-up, or its reason
                problems += _failure_alone(cand_dir, gate, finding, where, result, str(problem))
                continue
            if problem:
                problems.append(problem)
                continue
            _count(result, gate, got)
            problems += [
                Problem("rederive", f"{cand_dir.name}/{m.record}", f"{gate}: {m.line()}")
                for m in got.mismatches
            ]
            problems += _claims_rederived(cand_dir, gate, finding, got, where)
            problems += checks_agree(gate, finding, got, where)
        problems += _outcome_supported(cand_dir, gate, finding, settings, got, where, result)
    return problems


def with_fallbacks(resolved: dict[str, Any], finding: Finding) -> dict[str, Any]:
    """The recorded settings, completed from the finding's own candidate spec where a run made
    before they were recorded lacks them (the stated version, TP size, GPUs, the model pin)."""
    spec = finding.spec
    out = dict(resolved)
    out.setdefault("engine_version", (spec.get("engine") or {}).get("version"))
    out.setdefault("tp", (spec.get("serve") or {}).get("tensor_parallel_size"))
    out.setdefault("gpus", spec.get("gpus") or {"count": 0})
    out.setdefault("model", {"revision": (spec.get("model") or {}).get("revision")})
    return out


def _count(result: Verification, gate: str, got: Rederived) -> None:
    if got.records:  # a gate with nothing raw to re-check (no engine asked) is not listed
        result.rechecked[gate] += got.records
    if got.read:
        result.rejudged[gate] += len(got.read)


def _rederive(
    cand_dir: Path, gate: str, settings: dict[str, Any], resolved: dict[str, Any], rehash: bool
) -> tuple[Rederived, Problem | None]:
    run = GateRun(
        cand_dir,
        settings,
        str(resolved.get("engine")),
        int(resolved.get("max_model_len") or 1),
        resolved,
        rehash,
    )
    try:
        return REDERIVERS[gate](run), None
    except Unrederivable as exc:
        return Rederived(), Problem("rederive", cand_dir.name, f"{gate}: {exc}")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        detail = f"{gate}: the raw exchanges or recorded settings are malformed ({exc!r})"
        return Rederived(), Problem("rederive", cand_dir.name, detail)


def checks_agree(gate: str, finding: Finding, got: Rederived, where: str) -> list[Problem]:
    """Each check (test) the finding records, against the same check judged again from its
    record: the same outcome; a passed check must have its record on disk."""
    tests = finding.gates[gate].tests
    problems = []
    for test, judged in got.checks.items():
        recorded = tests.get(test)
        if recorded in (None, "error") or recorded == judged.outcome:
            continue  # not recorded by name (an older finding), or a suite error: not judged
        why = f" ({judged.reason})" if judged.reason else ""
        problems.append(
            Problem(
                "rederive",
                f"{where} [{gate}.{test}]",
                f"recorded {recorded}; {judged.record} gives {judged.outcome}{why}",
            )
        )
    problems += [
        Problem("rederive", f"{where} [{gate}.{test}]", f"passed, but {record} is not on disk")
        for test, record in got.missing.items()
        if tests.get(test) == "passed"
    ]
    return problems


def _claims_rederived(
    cand_dir: Path, gate: str, finding: Finding, got: Rederived, where: str
) -> list[Problem]:
    """Each claim on a verdict artifact, derived again over the re-derived rows it covered (the
    rows within the artifact's first ``bytes`` at claim time)."""
    problems = []
    for claim in finding.gates[gate].claims:
        rows = got.rows.get(claim.artifact)
        path = cand_dir / claim.artifact
        if rows is None or claim.bytes is None or not path.is_file():
            continue
        covered = sum(1 for line in path.read_bytes()[: claim.bytes].splitlines() if line.strip())
        data = "".join(json.dumps(r) + "\n" for r in rows[:covered]).encode()
        try:
            value = derive_from(data, path, claim.derive)
        except DerivationError as exc:
            value = f"<{exc}>"
        if not same(claim.value, value):
            problems.append(
                Problem(
                    "rederive",
                    f"{where} [{gate}.{claim.name}]",
                    f"claims {claim.value!r}; the raw exchanges give {value!r}",
                )
            )
    return problems


def _outcome_supported(
    cand_dir: Path,
    gate: str,
    finding: Finding,
    settings: dict[str, Any],
    got: Rederived | None,
    where: str,
    result: Verification,
) -> list[Problem]:
    """A passed gate's claims support a pass and its raw records fail nothing; a failed gate's
    claims or raw records show the failure (or its start-up failure, or it failed before it
    wrote any: it stands on its reason)."""
    gate_result = finding.gates[gate]
    verdicts = {c.name: supports_pass(c.name, c.value, settings) for c in gate_result.claims}
    values = {c.name: c.value for c in gate_result.claims}
    failures = got.failures if got else []
    if gate_result.outcome == PASSED:
        problems = [
            Problem(
                "unsupported",
                f"{where} [{gate}.{name}]",
                f"{gate} passed, but claim {name} = {values[name]!r} does not support a pass",
            )
            for name, ok in verdicts.items()
            if ok is False
        ]
        return problems + [
            Problem("unsupported", where, f"{gate} passed, but the raw exchanges fail: {f}")
            for f in failures
        ]
    if got is None or failures or False in verdicts.values():
        return []
    failed = [t for t, o in gate_result.tests.items() if o == "failed"]
    if failed and all(t in got.missing for t in failed):  # failed before writing its records
        records = ", ".join(got.missing[t] for t in failed)
        return _failure_alone(cand_dir, gate, finding, where, result, f"no {records} on disk")
    if _server_down(finding, gate):
        return _failure_alone(cand_dir, gate, finding, where, result, "")
    return [
        Problem(
            "unsupported",
            where,
            f"{gate} failed, but neither its claims nor its raw exchanges show a failure",
        )
    ]


def _server_down(finding: Finding, gate: str) -> str:
    """How the server went down in ``gate`` (start-up failed / server died), or ""."""
    down = finding.server_down or ""
    return down.partition(" (")[2].rstrip(")") if down.partition(" (")[0] == gate else ""


def _failure_alone(
    cand_dir: Path, gate: str, finding: Finding, where: str, result: Verification, why: str
) -> list[Problem]:
    """A failed gate with no raw record of its own judged. A start-up failure is judged again
    from ``readiness.json``; any other failure before a record was written stands on its
    reason, said as a note (a FAIL claims nothing a record must back)."""
    how = _server_down(finding, gate)
    if how == "start-up failed":
        got = startup(cand_dir)
        if got is not None:
            result.rejudged[gate] += len(got.read)
            if got.failures:
                return []
            return [
                Problem(
                    "unsupported",
                    where,
                    f"{gate} failed at the server's start-up, but {READINESS} shows it ready",
                )
            ]
        why = f"no {READINESS} on disk"
    detail = f"{gate} failed ({how or 'before its raw records were written'}; {why}): "
    result.notes.append(Problem("note", where, detail + finding.gates[gate].reason[:200]))
    return []


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
