"""What a run found, per candidate and gate; saved as ``finding.json`` on every change.

The verdict is derived, never set: PASS only when every gate passed or does not apply, and every
claim names an artifact. Anything less final (a gate not run, an interrupted run) is INCOMPLETE,
which is also what a crash leaves on disk, since the file is rewritten after every gate.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .candidate import GATES, Candidate
from .claims import Claim, stamp
from .evidence import Evidence

PASSED, FAILED, BLOCKED, NOT_APPLICABLE, NOT_RUN = (
    "passed",
    "failed",
    "blocked",
    "not_applicable",
    "not_run",
)


def derive_verdict(outcomes: set[str], *, finished: bool, unbacked_claims: int) -> str:
    """The rule, in one place (``verify`` applies it to a finding on disk)."""
    if FAILED in outcomes:
        return "FAIL"
    if not finished or outcomes - {PASSED, NOT_APPLICABLE}:
        return "INCOMPLETE"
    if unbacked_claims:
        return "INCOMPLETE"
    return "PASS"


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

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
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
        for gate in GATES:
            if self.gates[gate].outcome == FAILED:
                return gate, self.gates[gate]
        return None

    def verdict(self) -> str:
        return derive_verdict(
            {g.outcome for g in self.gates.values()},
            finished=self.finished,
            unbacked_claims=unbacked(
                (g.outcome, [c.artifact for c in g.claims]) for g in self.gates.values()
            ),
        )

    def as_dict(self) -> dict[str, Any]:
        failure = self.first_failure()
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
            "verdict": self.verdict(),
            "finished": self.finished,
            "failed_gate": failure[0] if failure else None,
            "gates": {g: r.as_dict() for g, r in self.gates.items()},
        }

    def save(self) -> None:
        for result in self.gates.values():  # claims made without a stamp get one now
            result.claims = [stamp(self.evidence.root, c) for c in result.claims]
        self.evidence.write_json("finding.json", self.as_dict())
