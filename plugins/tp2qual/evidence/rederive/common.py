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

from tp2qual.evidence.claims import same

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


@dataclass
class Rederived:
    records: int = 0  # raw exchanges re-checked
    rows: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # artifact -> rows
    mismatches: list[Mismatch] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # what fails, by the raw exchanges

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
