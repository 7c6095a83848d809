"""What a run found, per candidate and gate; saved as ``finding.json`` on every change.

The verdict is derived, never set: PASS only when every gate passed or does not apply, and every
claim names an artifact. FAIL only when a gate failed *because of the candidate* (an assertion
about its answers, its server not starting or dying). ERROR when the suite itself broke (a bug,
a warning turned error): that is never a finding about the candidate. Anything less final (a gate
not run, an interrupted run) is INCOMPLETE, which is also what a crash leaves on disk, since the
file is rewritten after every gate.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tp2qual.candidate import GATES, Candidate
from tp2qual.evidence.claims import Claim, stamp
from tp2qual.evidence.layout import FINDING, Evidence


class Outcome(StrEnum):
    """What happened to one gate of one candidate."""

    PASSED = "passed"
    FAILED = "failed"  # the candidate's fault: an assertion about it, its server down
    ERROR = "error"  # the suite's own fault: never held against the candidate
    BLOCKED = "blocked"
    NOT_APPLICABLE = "not_applicable"
    NOT_RUN = "not_run"


class Verdict(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"
    INCOMPLETE = "INCOMPLETE"


PASSED, FAILED, ERROR = Outcome.PASSED, Outcome.FAILED, Outcome.ERROR
BLOCKED, NOT_APPLICABLE, NOT_RUN = Outcome.BLOCKED, Outcome.NOT_APPLICABLE, Outcome.NOT_RUN
STOPPING = (Outcome.FAILED, Outcome.ERROR, Outcome.BLOCKED)  # later gates cannot run after these


def derive_verdict(outcomes: set[str], *, finished: bool, unbacked_claims: int) -> Verdict:
    """The rule, in one place (``verify`` applies it to a finding on disk). A candidate's proven
    failure outranks a suite error: a FAIL asserted before the suite broke stays true."""
    if FAILED in outcomes:
        return Verdict.FAIL
    if ERROR in outcomes:
        return Verdict.ERROR
    if not finished or outcomes - {PASSED, NOT_APPLICABLE}:
        return Verdict.INCOMPLETE
    if unbacked_claims:
        return Verdict.INCOMPLETE
    return Verdict.PASS


def unbacked(gates: Iterable[tuple[str, list[str]]]) -> int:
    """Claims naming no artifact, plus passed gates that claim nothing: either keeps PASS away.
    ``gates`` yields (outcome, [claim artifact, ...]) per gate."""
    return sum(
        sum(not artifact for artifact in artifacts) + (outcome == PASSED and not artifacts)
        for outcome, artifacts in gates
    )


@dataclass
class GateResult:
    outcome: str = NOT_RUN
    reason: str = ""
    claims: list[Claim] = field(default_factory=list)
    tests: dict[str, str] = field(default_factory=dict)  # test id -> outcome
    seconds: float = 0.0
    excerpt: list[str] = field(default_factory=list)  # log lines explaining a failure
    error_artifact: str = ""  # a suite error's traceback, relative to the candidate folder
    diagnosis: dict[str, Any] | None = None  # cause, evidence lines, remedy (checks.diagnosis)

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": str(self.outcome),
            "error_artifact": self.error_artifact,
            "diagnosis": self.diagnosis,
            "reason": self.reason,
            "claims": [c.as_dict() for c in self.claims],
            "tests": self.tests,
            "seconds": round(self.seconds, 3),
            "excerpt": self.excerpt,
        }


@dataclass
class CandidateRecord:
    candidate: Candidate
    evidence: Evidence
    run_id: str
    started: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat())
    identity: dict[str, Any] = field(default_factory=dict)
    gates: dict[str, GateResult] = field(default_factory=lambda: {g: GateResult() for g in GATES})
    finished: bool = False
    server_down: str = ""  # set once the server failed to start or died: nothing more can run

    def first_failure(self) -> tuple[str, GateResult] | None:
        return self.first(FAILED)

    def first(self, *outcomes: str) -> tuple[str, GateResult] | None:
        for gate in GATES:
            if self.gates[gate].outcome in outcomes:
                return gate, self.gates[gate]
        return None

    def verdict(self, *, settled: bool = False) -> Verdict:
        """The verdict now; ``settled``: as it stands once the session ends (a candidate whose
        gates all ran is final before the session is — what a lane in the same run waits for)."""
        return derive_verdict(
            {g.outcome for g in self.gates.values()},
            finished=self.finished or settled,
            unbacked_claims=unbacked(
                (g.outcome, [c.artifact for c in g.claims]) for g in self.gates.values()
            ),
        )

    def as_dict(self) -> dict[str, Any]:
        failure, error = self.first_failure(), self.first(ERROR)
        return {
            "schema": "tp2qual.finding/1",
            "run_id": self.run_id,
            "date": self.started[:10],
            "started": self.started,
            "updated": dt.datetime.now(dt.UTC).isoformat(),
            "candidate": self.candidate.name,
            "candidate_file": str(self.candidate.path),
            "candidate_spec": self.candidate.spec,
            "identity": self.identity,
            "verdict": str(self.verdict()),
            "finished": self.finished,
            "failed_gate": failure[0] if failure else None,
            "suite_error_gate": error[0] if error else None,
            "gates": {g: r.as_dict() for g, r in self.gates.items()},
        }

    def save(self) -> None:
        for result in self.gates.values():  # claims made without a stamp get one now
            result.claims = [stamp(self.evidence.root, c) for c in result.claims]
        self.evidence.write_json(FINDING, self.as_dict())
