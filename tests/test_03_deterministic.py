"""Gate 03 — deterministic known answers.

Pass means: at temperature 0 with a fixed seed, every known-answer prompt is answered correctly
(normalised match; reasoning kept apart from the answer) and byte-identically on every repeat;
a prompt that says ``expect_reasoning`` also needs reasoning the engine kept out of the answer.
A reply cut off inside its reasoning is reported as a budget problem, not as a wrong answer.
Artifacts: every request and response (``deterministic.jsonl``) and one verdict per prompt
(``deterministic_verdicts.jsonl``).
"""

from __future__ import annotations

import pytest

from tp2qual.checks.answers import (
    check_answer,
    check_budget,
    check_identical,
    check_reasoning_apart,
    split_reasoning,
)
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer, chat_body, messages

pytestmark = pytest.mark.deterministic


def _body(candidate: Candidate, prompt: dict, settings: dict) -> dict:
    chat = messages(prompt["prompt"], prompt.get("system"))
    return chat_body(candidate, chat, max_tokens=settings["max_tokens"], seed=settings["seed"])


def test_known_answers_correct_and_identical(
    api: Api, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    settings = candidate.gate("deterministic")
    assert settings["prompts"], "the candidate names no known-answer prompts"
    problems = []
    for prompt in settings["prompts"]:
        answers, reasonings, finishes = [], [], []
        for i in range(settings["repeats"]):
            reply = api.chat(f"{prompt['id']}#{i}", _body(candidate, prompt, settings))
            assert reply.status == 200, f"{prompt['id']}: HTTP {reply.status}: {reply.body}"
            answer, reasoning = split_reasoning(reply.message)
            answers.append(answer)
            reasonings.append(reasoning)
            finishes.append(reply.finish_reason)
        budget = check_budget(answers[0], reasonings[0], finishes[0], settings["max_tokens"])
        correct = (
            check_answer(answers[0], prompt["expect"], prompt.get("mode", "contains"))
            if budget.ok
            else budget
        )
        if prompt.get("expect_reasoning") and correct.ok:
            correct = check_reasoning_apart(answers[0], reasonings[0])
        identical = check_identical(answers)
        record.evidence.append_jsonl(
            "deterministic_verdicts.jsonl",
            {
                "id": prompt["id"],
                "answer": answers[0],
                "reasoning": reasonings[0],
                "expect": prompt["expect"],
                "correct": correct.ok,
                "finish_reason": finishes[0],
                "identical": identical.ok,
                "repeats": len(answers),
            },
        )
        problems += [f"{prompt['id']}: {v.reason}" for v in (correct, identical) if not v.ok]
    claim("known_answers_correct", "deterministic_verdicts.jsonl", op="all", field="correct")
    claim(
        "answers_identical_over_repeats",
        "deterministic_verdicts.jsonl",
        op="all",
        field="identical",
    )
    assert not problems, "\n".join(problems)
