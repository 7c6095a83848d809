"""Gate 03's decision for one known-answer prompt, from its repeats' answers.

The gate calls ``judge_known_answer`` on the live replies and ``verify`` on the raw records
(evidence/rederive/deterministic.py): one rule, one copy. The first repeat's answer is held to
its allowed finish reasons and its expected answer (``checks.answers.check_budgeted_answer``;
every repeat's ending too), then, where the
prompt says ``expect_reasoning``, to reasoning kept apart; every repeat's answer must be the
same (``check_identical``). Pure: messages in, a frozen decision out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.answers import (
    check_budgeted_answer,
    check_finish,
    check_identical,
    check_reasoning_apart,
    split_reasoning,
)
from tp2qual.checks.verdict import Verdict

Reply = tuple[Mapping[str, Any], str | None]  # (choice 0's message, its finish reason)


@dataclass(frozen=True)
class KnownAnswer:
    answer: str
    reasoning: str
    finish_reason: str | None
    correct: Verdict
    identical: Verdict
    repeats: int

    def row(self) -> dict[str, Any]:
        """The decided fields of a ``deterministic_verdicts.jsonl`` row (verify compares them)."""
        row = {
            "answer": self.answer,
            "correct": self.correct.ok,
            "identical": self.identical.ok,
            "repeats": self.repeats,
        }
        cls = self.correct.measures.get("finish_class")  # only where an ending was refused
        return row | {"finish_class": cls} if cls else row

    def problems(self, prompt_id: str) -> list[str]:
        return [f"{prompt_id}: {v.reason}" for v in (self.correct, self.identical) if not v.ok]


def _every_ending(
    replies: Sequence[Reply], split: Sequence[tuple[str, str]], allowed: Sequence[str]
) -> Verdict | None:
    """The first later repeat whose ending is not allowed: every request is held to it."""
    for i, ((_, finish), (answer, reasoning)) in enumerate(zip(replies, split, strict=True)):
        ending = check_finish(answer, reasoning, finish, allowed)
        if not ending.ok:
            return Verdict.failed(f"repeat {i}: {ending.reason}", **ending.measures)
    return None


def judge_known_answer(
    prompt: Mapping[str, Any],
    replies: Sequence[Reply],
    max_tokens: int,
    allowed: Sequence[str] | None = None,
) -> KnownAnswer:
    """``prompt``: the candidate's entry (``expect``, ``mode``, ``expect_reasoning``);
    ``replies``: every repeat, in order; ``allowed``: the gate's ``finish_reasons`` (None: a run
    recorded before they were judged, see ``check_budgeted_answer``)."""
    if not replies:
        raise ValueError("judge_known_answer needs at least one reply")
    split = [split_reasoning(dict(message)) for message, _ in replies]
    answer, reasoning = split[0]
    finish = replies[0][1]
    expect, mode = prompt["expect"], prompt.get("mode", "contains")
    correct = check_budgeted_answer(answer, reasoning, finish, max_tokens, expect, mode, allowed)
    if correct.ok and allowed is not None:
        correct = _every_ending(replies, split, allowed) or correct
    if prompt.get("expect_reasoning") and correct.ok:
        correct = check_reasoning_apart(answer, reasoning)
    identical = check_identical([a for a, _ in split])
    return KnownAnswer(answer, reasoning, finish, correct, identical, len(split))
