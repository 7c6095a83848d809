"""The state of one qualification run, shared by the plugins through ``config.stash``."""

from __future__ import annotations

import datetime as dt
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

from tp2qual.artifacts.finding import CandidateRecord, read_finding
from tp2qual.artifacts.layout import Evidence
from tp2qual.candidate import Candidate
from tp2qual.evidence.suite import SUITE, suite_identity
from tp2qual.redact import Redactor


def new_run_id() -> str:
    now = dt.datetime.now(dt.UTC)
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)


@dataclass
class RunState:
    results_root: Path
    candidates: list[Candidate]
    run_id: str = field(default_factory=new_run_id)
    records: dict[str, CandidateRecord] = field(default_factory=dict)
    # Set when several processes (xdist workers, one per host) write this run: the controller,
    # not a worker, closes it (final manifest, verification, report).
    shared: bool = False
    # Candidates that cannot run in this run at all, and why (their host is down, no host fits):
    # their gates are recorded NOT_RUN with the reason, so the finding is INCOMPLETE, never FAIL.
    not_run: dict[str, str] = field(default_factory=dict)

    @property
    def run_dir(self) -> Path:
        return self.results_root / self.run_id

    def redactor(self, candidate: Candidate) -> Redactor:
        return Redactor(candidate.env())

    def record(self, candidate: Candidate) -> CandidateRecord:
        """The candidate's record, creating its evidence folder on first use."""
        if candidate.name not in self.records:
            self.mark_latest()
            evidence = Evidence(self.run_dir / candidate.name, self.redactor(candidate))
            record = CandidateRecord(candidate, evidence, self.run_id)
            # A finding of this run already on disk when this worker first meets the candidate:
            # the worker that held it died (xdist hands its unfinished tests to a fresh one).
            left = read_finding(evidence.root, self.run_dir) if self.shared else None
            if left is not None:
                record.adopt(left)
            if "suite" not in record.identity:  # which suite judged, in every finding
                record.identity["suite"] = suite_identity()
                evidence.write_json(SUITE, record.identity["suite"])
            self.records[candidate.name] = record
        return self.records[candidate.name]

    def mark_latest(self) -> None:
        """``results/latest`` points at the newest run (relative link, survives moves)."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        latest = self.results_root / "latest"
        tmp = self.results_root / f".latest-{self.run_id}-{os.getpid()}"
        if latest.is_symlink() and os.readlink(latest) == self.run_id:
            return
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(self.run_id)
        os.replace(tmp, latest)
