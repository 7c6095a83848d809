"""One thing ``verify`` found wrong (or, as a note, a failure that stands on its reason)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    # tampered | missing | unlisted | manifest | finding | claim | unbacked | verdict
    # | rederive (the raw exchanges give another value) | unsupported (outcome vs evidence)
    # | reference (a gate took its reference from another run than the one rule names)
    # | note (not a problem: a failure that stands on its reason alone)
    # | cut (not a problem: where a gate stopped part-way, its records checked up to there)
    kind: str
    where: str  # path relative to the run folder
    detail: str

    def line(self) -> str:
        return f"{self.kind.upper():<9} {self.where}: {self.detail}"
