"""Gate 06's needle near the bound: the fill it must reach and the answer it must give.

The gate calls these on the live answer, ``verify`` on the raw record
(evidence/rederive/capacity.py) and on the claim a passed gate made (claim_support.py): one
rule, one copy. The needle's prompt must fill the bounded context to within ``FILL_SLACK`` of
``gates.capacity.fill``, and its answer, held to its budget, must name the hidden city. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.answers import check_budgeted_answer, split_reasoning

# The prompt is sized from a linear calibration of the server's own token counts, which a
# tokenizer does not follow exactly: this much short of the fill asked for still counts.
FILL_SLACK = 0.05
DEFAULT_ANSWER = "Lisbon"


@dataclass(frozen=True)
class NeedlePlan:
    """The needle prompt gate 06 sizes, and the fill of the bound it must then reach."""

    prompt_tokens: int  # the prompt's target length, on the server's own token counts
    budget: int  # the reply's max_tokens
    wanted_fill: float  # the fill ``fill_reaches`` judges the measured prompt against


def needle_plan(max_model_len: int, settings: Mapping[str, Any]) -> NeedlePlan:
    """The needle's prompt size: ``fill`` of the bound less the reply budget (room for the
    reply), judged against ``fill``."""
    budget = int(settings["needle_max_tokens"])
    wanted = float(settings["fill"])
    return NeedlePlan(int(max_model_len * wanted) - budget, budget, wanted)


def needle_answer(settings: Mapping[str, Any]) -> str:
    return str(settings.get("needle_answer", DEFAULT_ANSWER))


def fill_reaches(fill: Any, wanted: float) -> bool:
    """Whether a needle prompt's measured fill of the bound is the one asked for."""
    return isinstance(fill, int | float) and fill >= wanted - FILL_SLACK


def judge_needle(
    message: Mapping[str, Any],
    finish_reason: str | None,
    prompt_tokens: int | None,
    max_model_len: int,
    settings: Mapping[str, Any],
) -> tuple[dict[str, Any], str]:
    """The decided fields of the needle's ``capacity_results.jsonl`` row, and why its answer
    is wrong (empty when it is right)."""
    text, reasoning = split_reasoning(dict(message))
    expect = needle_answer(settings)
    verdict = check_budgeted_answer(
        text, reasoning, finish_reason, settings["needle_max_tokens"], [expect]
    )
    fill = prompt_tokens / max_model_len if isinstance(prompt_tokens, int) else 0.0
    row = {"prompt_tokens": prompt_tokens, "fill": fill, "answer": text, "expect": expect}
    return row | {"ok": verdict.ok}, verdict.reason
