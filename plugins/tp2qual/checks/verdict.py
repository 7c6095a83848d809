"""The frozen result every pure check returns: decide here, act in the gate."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Verdict:
    """Outcome of one pure check.

    ``ok`` is the decision, ``reason`` one line a human reads when it is False (empty when
    ok), and ``measures`` the figures the decision rested on, recorded as evidence.
    """

    ok: bool
    reason: str = ""
    measures: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def passed(cls, **measures: Any) -> Verdict:
        return cls(True, "", measures)

    @classmethod
    def failed(cls, reason: str, **measures: Any) -> Verdict:
        return cls(False, reason, measures)


@dataclass(frozen=True)
class NotJudged:
    """A check that could not judge here (nothing to judge, or no power): why, never a pass."""

    reason: str
