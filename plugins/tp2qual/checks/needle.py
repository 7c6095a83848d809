"""Gate 06's needle near the bound: the fill it must reach and the answer it must give.

The gate calls these on the live answer, ``verify`` on the raw record
(evidence/rederive/capacity.py) and on the claim a passed gate made (claim_support.py): one
rule, one copy. The needle's prompt is sized by ``needle_plan`` and must fill the bounded
context to within ``FILL_SLACK`` of the fill that plan wants, and its answer, ended as
``finish_reasons`` allows (default ``stop``) with visible text, must name the hidden city. Pure.

The rule (issue 35): the prompt fills ``gates.capacity.fill`` of the bound where prompt and reply
budget fit, else as much as fits: ``min(fill x bound, bound - budget - FILL_SLACK x bound)``, and
the fill judged is that prompt's share of the bound. The reply budget is room for the reply, never
taken out of the fill measured: 4096 tokens at a 32,768 bound fill 82.5 % (was asked 90 % and
given 77.5 %, a FAIL by the suite's own arithmetic). The ``FILL_SLACK`` kept free is the slack the
fill check grants the calibration the other way: a prompt the linear fit undercounts (longer
sentence numbers take more tokens than the calibration's) must still leave the budget its room,
or the engine refuses prompt plus budget over the bound.
"""

from __future__ import annotations

import math
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
    """The needle's prompt size: ``fill`` of the bound where it and the reply budget fit, else
    what fits with ``FILL_SLACK`` of the bound to spare; judged against its own share."""
    budget = int(settings["needle_max_tokens"])
    asked = int(max_model_len * float(settings["fill"]))
    prompt = max(1, min(asked, fits_beside(max_model_len, budget)))
    return NeedlePlan(prompt, budget, prompt / max_model_len)


def fits_beside(max_model_len: int, budget: int) -> int:
    """The largest prompt gate 06 asks beside a reply ``budget``: the bound less the budget,
    less ``FILL_SLACK`` of the bound for the calibration's undercount (also the ladder's cap)."""
    return max_model_len - budget - math.ceil(max_model_len * FILL_SLACK)


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
    """The decided fields of the needle's ``capacity_results.jsonl`` row (its fill, the fill
    its plan wants and whether it reached it), and why its answer is wrong (empty when it is
    right)."""
    text, reasoning = split_reasoning(dict(message))
    expect = needle_answer(settings)
    # settings name no finish_reasons only in a run recorded before they were judged
    allowed = settings.get("finish_reasons")
    verdict = check_budgeted_answer(
        text, reasoning, finish_reason, settings["needle_max_tokens"], [expect], "contains", allowed
    )
    fill = prompt_tokens / max_model_len if isinstance(prompt_tokens, int) else 0.0
    wanted = needle_plan(max_model_len, settings).wanted_fill
    row = {"prompt_tokens": prompt_tokens, "fill": fill, "answer": text, "expect": expect}
    reached = {"fill_wanted": wanted, "fill_reached": fill_reaches(fill, wanted)}
    cls = verdict.measures.get("finish_class")  # only where an ending was refused
    ended = {"finish_class": cls} if cls else {}
    return row | reached | ended | {"ok": verdict.ok}, verdict.reason
