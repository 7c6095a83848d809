"""verify, gate by gate: every gate that ran judged again from its raw records.

Each gate's re-derivation (``evidence.rederive``) runs with the settings the run recorded at its
start; here its result is held against the finding: the verdict rows and claims it gives, each
check's recorded outcome, and the gate's outcome (a passed gate's records fail nothing; a failed
gate's show its failure, its start-up failure (``readiness.json``), or it stands on its reason
as a note). Reading files is all it does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tp2qual.artifacts.claims import DerivationError, derive_from, same
from tp2qual.artifacts.finding import FAILED, PASSED, Finding
from tp2qual.evidence.problem import Problem
from tp2qual.evidence.rederive import (
    REDERIVERS,
    RESOLVED_CANDIDATE,
    GateRun,
    Rederived,
    Unrederivable,
    read_settings,
    supports_pass,
)
from tp2qual.evidence.rederive.control import control
from tp2qual.evidence.rederive.startup import READINESS, startup

if TYPE_CHECKING:
    from tp2qual.evidence.verify import Verification


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
            if got.cut:  # what it wrote is checked above; where it stopped is said
                result.cuts.append(Problem("cut", where, f"{gate} cut short {got.cut}"))
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
        got = REDERIVERS[gate](run)
        control(run, gate, got)  # every gate's answers: the reasoning control they prove
        return got, None
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
