"""Gate 07's request near the bound: how long its prompt is, what it decodes, and how the
serve's decode there is checked again. The gate sizes it by this, and so does the rehearsal
(``tp2qual.rehearsal``). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ECHO = "echo"  # the prompt plus the answer prefilled again, every position with its logprobs


@dataclass(frozen=True)
class NearBoundPlan:
    prompt_tokens: int  # the target, on the server's own token count of a sample
    max_tokens: int
    check: str  # how the decode is checked again: ECHO

    @property
    def echo_positions(self) -> int:
        """Positions whose prompt logprobs the check asks for (0: none)."""
        return self.prompt_tokens + self.max_tokens if self.check == ECHO else 0


def near_bound_plan(max_model_len: int, settings: Mapping[str, Any]) -> NearBoundPlan:
    target = int(max_model_len * float(settings["near_bound_fill"]))
    return NearBoundPlan(target, int(settings["near_bound_max_tokens"]), ECHO)
