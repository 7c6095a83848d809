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
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from tp2qual.artifacts.claims import Claim, stamp
from tp2qual.artifacts.layout import FINDING, Evidence
from tp2qual.artifacts.pass_sentence import pass_sentence, reference_verdict
from tp2qual.candidate import GATES, Candidate


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
    tests: dict[str, str] = field(default_factory=dict)  # test -> passed|failed|error|skipped
    skipped: dict[str, str] = field(default_factory=dict)  # test -> why it did not judge
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
            "skipped": self.skipped,
            "seconds": round(self.seconds, 3),
            "excerpt": self.excerpt,
        }

    @classmethod
    def from_dict(cls, data: Any) -> GateResult:
        """A gate as written, read leniently: a hand-edited finding reads as what it says, and
        ``verify`` then names what does not add up, instead of the reader crashing on it."""
        data = data if isinstance(data, Mapping) else {}
        claims = data.get("claims") if isinstance(data.get("claims"), list) else []
        tests = data.get("tests") if isinstance(data.get("tests"), Mapping) else {}
        skipped = data.get("skipped") if isinstance(data.get("skipped"), Mapping) else {}
        diagnosis = data.get("diagnosis")
        return cls(
            outcome=str(data.get("outcome") or NOT_RUN),
            reason=str(data.get("reason") or ""),
            claims=[_claim(c) for c in claims if isinstance(c, Mapping)],
            tests={str(k): str(v) for k, v in tests.items()},
            skipped={str(k): str(v) for k, v in skipped.items()},
            seconds=_float(data.get("seconds")),
            excerpt=[str(line) for line in data.get("excerpt") or ()],
            error_artifact=str(data.get("error_artifact") or ""),
            diagnosis=dict(diagnosis) if isinstance(diagnosis, Mapping) else None,
        )


def _claim(data: Mapping[str, Any]) -> Claim:
    size = data.get("bytes")
    return Claim(
        name=str(data.get("name") or "?"),
        value=data.get("value"),
        artifact=str(data.get("artifact") or ""),
        derive=dict(data["derive"]) if isinstance(data.get("derive"), Mapping) else {},
        sha256=str(data.get("sha256") or ""),
        bytes=size if isinstance(size, int) and not isinstance(size, bool) else None,
    )


def _float(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


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

    def adopt(self, left: Finding) -> None:
        """Take over what a dead worker recorded for this candidate: its gates stay as they
        were, and nothing more runs (its server died with it), so the verdict is INCOMPLETE."""
        self.started = left.started or self.started
        self.identity = left.identity
        self.gates = {g: left.gates.get(g) or GateResult() for g in GATES}
        running = next((g for g in GATES if self.gates[g].outcome == NOT_RUN), GATES[-1])
        self.server_down = f"{running} (the worker running this candidate died)"

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

    def sentence(self) -> str | None:
        """The one sentence of a PASS (artifacts/pass_sentence.py), None for another verdict;
        the reference's verdict is read from this run's folder."""
        if self.verdict() != Verdict.PASS:
            return None
        spec = self.candidate.spec
        said = reference_verdict(self.evidence.root.parent, spec)
        return pass_sentence(str(Verdict.PASS), spec, self.gates["agreement"], said)

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
            "server_down": self.server_down or None,
            "pass_sentence": self.sentence(),
            "gates": {g: r.as_dict() for g, r in self.gates.items()},
        }

    def save(self) -> None:
        for result in self.gates.values():  # claims made without a stamp get one now
            result.claims = [stamp(self.evidence.root, c) for c in result.claims]
        self.evidence.write_json(FINDING, self.as_dict())


@dataclass(frozen=True)
class Finding:
    """A ``finding.json`` as read back: what verify, the report, lanes and the TP1 comparison
    consume. ``verdict``, ``failed_gate`` and ``suite_error_gate`` are what the file *states*;
    ``derived_verdict`` is what its gates give (``verify`` compares the two)."""

    run_id: str = ""
    candidate: str = ""
    verdict: str = ""
    finished: bool | None = None  # None: the file does not say, so no verdict is provable
    started: str = ""
    failed_gate: str | None = None
    suite_error_gate: str | None = None
    server_down: str | None = None  # "<gate> (start-up failed)" / "<gate> (server died)"
    spec: dict[str, Any] = field(default_factory=dict)
    identity: dict[str, Any] = field(default_factory=dict)
    gates: dict[str, GateResult] = field(default_factory=dict)  # every gate, NOT_RUN if absent
    stated_sentence: str | None = None  # its "pass_sentence" (None: none, or an older finding)

    @classmethod
    def read(cls, path: Path) -> Finding:
        """Raises OSError or ValueError when the file cannot be read as JSON."""
        return cls.from_dict(json.loads(path.read_text()))

    @classmethod
    def from_dict(cls, data: Any) -> Finding:
        if not isinstance(data, Mapping):
            raise ValueError("a finding is a JSON object")
        gates = data["gates"] if isinstance(data.get("gates"), Mapping) else {}
        names = [*GATES, *(str(g) for g in gates if g not in GATES)]
        finished = data.get("finished")

        def mapping(key: str) -> dict[str, Any]:
            value = data.get(key)
            return dict(value) if isinstance(value, Mapping) else {}

        return cls(
            run_id=str(data.get("run_id") or ""),
            candidate=str(data.get("candidate") or ""),
            verdict=str(data.get("verdict") or ""),
            finished=bool(finished) if finished is not None else None,
            started=str(data.get("started") or ""),
            failed_gate=data.get("failed_gate") or None,
            suite_error_gate=data.get("suite_error_gate") or None,
            server_down=str(data["server_down"]) if data.get("server_down") else None,
            spec=mapping("candidate_spec"),
            identity=mapping("identity"),
            gates={g: GateResult.from_dict(gates.get(g)) for g in names},
            stated_sentence=str(data["pass_sentence"]) if data.get("pass_sentence") else None,
        )

    @property
    def lane_after(self) -> str | None:
        return (self.spec.get("lane") or {}).get("after")

    @property
    def description(self) -> str:
        return str(self.spec.get("description") or "")

    def first(self, outcome: str) -> str | None:
        return next((g for g in GATES if self.gates[g].outcome == outcome), None)

    def pass_sentence(self, run_dir: Path) -> str | None:
        """The one sentence of a PASS as its gates give it, read where it ran (``run_dir``: the
        named reference's verdict there); None for another verdict."""
        said = reference_verdict(run_dir, self.spec) if self.verdict == Verdict.PASS else None
        return pass_sentence(self.verdict, self.spec, self.gates.get("agreement"), said)

    def claims(self) -> list[tuple[str, Claim]]:
        return [(gate, claim) for gate, result in self.gates.items() for claim in result.claims]

    def figures(self, gate: str) -> dict[str, float]:
        """A gate's numeric claims by name (the TP1 comparison reads the throughput gate's)."""
        result = self.gates.get(gate) or GateResult()
        return {
            c.name: c.value
            for c in result.claims
            if isinstance(c.value, int | float) and not isinstance(c.value, bool)
        }

    def derived_verdict(self) -> Verdict:
        return derive_verdict(
            {self.gates[g].outcome for g in GATES},
            finished=bool(self.finished),
            unbacked_claims=unbacked(
                (self.gates[g].outcome, [c.artifact for c in self.gates[g].claims]) for g in GATES
            ),
        )


def read_finding(ref: str | Path | None, base: Path) -> Finding | None:
    """A recorded finding named by path (a finding.json, or a folder holding one, relative to
    ``base``), or None when there is none or it cannot be read."""
    if not ref:
        return None
    path = Path(ref).expanduser()
    path = path if path.is_absolute() else (base / path)
    path = path / FINDING if path.is_dir() else path
    try:
        return Finding.read(path)
    except (OSError, ValueError):
        return None
