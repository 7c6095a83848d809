"""What every gate's re-derivation shares: the run as recorded, the result, its mismatches.

``GateRun`` reads a gate's raw records from the candidate's evidence folder; ``Rederived`` holds
the verdict rows as they should read and compares them with the rows recorded; the ``…_of``
helpers read one field of a raw exchange the way every gate's check read it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tp2qual.artifacts.claims import same
from tp2qual.checks.verdict import NotJudged, Verdict

RESOLVED_CANDIDATE = "identity/candidate.json"  # written before the candidate's first gate


class Unrederivable(ValueError):
    """The raw exchanges or the recorded settings needed to re-derive a gate are not there."""


@dataclass(frozen=True)
class Mismatch:
    record: str  # the raw record, "deterministic.jsonl capital#0"
    what: str  # "deterministic_verdicts.jsonl correct"
    recorded: Any
    rederived: Any

    def line(self) -> str:
        return f"{self.what} recorded {self.recorded!r}, raw exchanges give {self.rederived!r}"


@dataclass(frozen=True)
class Judged:
    """One of a gate's checks (its test) judged again from its raw record."""

    outcome: str  # passed | failed | skipped, as the finding's ``tests`` says it
    reason: str
    record: str  # the raw record it was judged from


@dataclass
class Rederived:
    records: int = 0  # raw exchanges re-checked (requests and their answers)
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # artifact -> rows
    mismatches: list[Mismatch] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # what fails, by the raw exchanges
    checks: dict[str, Judged] = field(default_factory=dict)  # test -> judged again
    missing: dict[str, str] = field(default_factory=dict)  # test -> its record, not on disk
    read: list[str] = field(default_factory=list)  # other raw records judged (logs, identity)
    cut: str = ""  # where the gate stopped before judging (its raw records end there), or ""

    def judged(
        self, test: str, verdict: Verdict | NotJudged, record: str, *, exchange: bool = False
    ) -> Verdict | None:
        """A check judged again from ``record``: kept under its test's name; a failure is one
        of the gate's failures; a record that is not an exchange (counted in ``records``) is
        listed in ``read``. Returns the verdict (None when the check could not judge)."""
        if isinstance(verdict, NotJudged):
            self.checks[test] = Judged("skipped", verdict.reason, record)
            return None
        if not exchange and record not in self.read:
            self.read.append(record)
        self.checks[test] = Judged("passed" if verdict.ok else "failed", verdict.reason, record)
        if not verdict.ok:
            self.failures.append(f"{record}: {verdict.reason}")
        return verdict

    def unmatched(
        self,
        record: str,
        artifact: str,
        row: dict[str, Any],
        *,
        what: str,
        found: str,
        recorded: str = "a verdict",
    ) -> None:
        """A recorded row whose raw ``what`` is not there: a mismatch, the row kept as written."""
        self.mismatches.append(Mismatch(record, what, recorded, found))
        self.rows[artifact].append(row)

    def compare(self, record: str, artifact: str, recorded: Mapping[str, Any], **new: Any) -> None:
        for key, value in new.items():
            if key not in recorded or not same_value(recorded[key], value):
                self.mismatches.append(
                    Mismatch(record, f"{artifact} {key}", recorded.get(key, "<absent>"), value)
                )


@dataclass(frozen=True)
class GateRun:
    """One gate of one candidate as the run recorded it."""

    root: Path  # the candidate's evidence folder
    settings: dict[str, Any]  # the gate's settings, as resolved at the run's start
    engine: str
    max_model_len: int
    resolved: dict[str, Any] = field(default_factory=dict)  # all of identity/candidate.json
    rehash: bool = False  # hash the model's bytes again (verify --rehash)

    def recorded(self) -> dict[str, Any]:
        """The settings the run recorded at its start (``resolved``, else read from disk)."""
        return self.resolved or read_settings(self.root)

    def json(self, artifact: str) -> dict[str, Any] | None:
        """A JSON record of the gate, or None when it is not on disk (Unrederivable when it
        does not parse as an object)."""
        path = self.root / artifact
        if not path.is_file():
            return None
        try:
            body = json.loads(path.read_text())
        except (UnicodeDecodeError, ValueError) as exc:
            raise Unrederivable(f"{artifact} does not parse: {exc}") from None
        if not isinstance(body, dict):
            raise Unrederivable(f"{artifact} is not a JSON object")
        return body

    def records(self, artifact: str, *, required: bool = True) -> list[dict[str, Any]]:
        path = self.root / artifact
        if not path.is_file():
            if required:
                raise Unrederivable(f"{artifact} is not on disk: nothing to re-derive from")
            return []
        try:
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        except (UnicodeDecodeError, ValueError) as exc:
            raise Unrederivable(f"{artifact} does not parse: {exc}") from None
        if not all(isinstance(r, dict) for r in rows):
            raise Unrederivable(f"{artifact} holds a line that is not a JSON object")
        return rows


def read_settings(root: Path) -> dict[str, Any]:
    """The resolved candidate the run recorded (raises Unrederivable when it did not)."""
    path = root / RESOLVED_CANDIDATE
    try:
        body = json.loads(path.read_text())
    except FileNotFoundError:
        raise Unrederivable(
            f"{RESOLVED_CANDIDATE} is not on disk: the settings the gates ran with are unknown"
        ) from None
    except (OSError, ValueError) as exc:
        raise Unrederivable(f"{RESOLVED_CANDIDATE} is unreadable: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("gates"), dict):
        raise Unrederivable(f"{RESOLVED_CANDIDATE} names no gate settings")
    return body


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and same(a, b, rel_tol=1e-6)
    return bool(a == b)


def by_tag(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The last exchange under each tag (a retried tag keeps the one the gate judged)."""
    return {str(r.get("tag")): r for r in records}


def message_of(exchange: Mapping[str, Any]) -> dict[str, Any]:
    try:
        message = exchange["response"]["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return {}
    return message if isinstance(message, dict) else {}


def finish_of(exchange: Mapping[str, Any]) -> str | None:
    try:
        return exchange["response"]["choices"][0].get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None


def status_of(exchange: Mapping[str, Any] | None) -> int | None:
    return exchange.get("status") if exchange else None


def chunks_of(exchange: Mapping[str, Any]) -> tuple[list[dict[str, Any]], list[float]]:
    pairs = [c for c in exchange.get("chunks") or [] if isinstance(c, dict)]
    return [c.get("data") or {} for c in pairs], [float(c["t"]) for c in pairs]


def as_recorded(value: Any) -> Any:
    """A value as a JSON record holds it (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value, default=str))
