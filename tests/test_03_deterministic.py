"""Gate 03 — deterministic known answers.

Pass means: at temperature 0 with a fixed seed, every known-answer prompt is answered correctly
(normalised match; reasoning kept apart from the answer) and byte-identically on every repeat;
a prompt that says ``expect_reasoning`` also needs reasoning the engine kept out of the answer.
Every repeat must end with a finish reason in ``finish_reasons`` (default ``stop``) and a
visible answer, even when its text holds the expected words: an answer cut at ``length`` fails
as "visible budget exhausted", one cut inside its reasoning as "reasoning budget exhausted".
Artifacts: every request and response (``deterministic.jsonl``) and one verdict per prompt
(``deterministic_verdicts.jsonl``).
"""

from __future__ import annotations

import pytest

from tp2qual.checks.known_answers import judge_known_answer
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
        replies = []
        for i in range(settings["repeats"]):
            reply = api.chat(f"{prompt['id']}#{i}", _body(candidate, prompt, settings))
            assert reply.status == 200, f"{prompt['id']}: HTTP {reply.status}: {reply.body}"
            replies.append((reply.message, reply.finish_reason))
        allowed = settings["finish_reasons"]
        judged = judge_known_answer(prompt, replies, settings["max_tokens"], allowed)
        record.evidence.append_jsonl(
            "deterministic_verdicts.jsonl",
            {
                "id": prompt["id"],
                "reasoning": judged.reasoning,
                "expect": prompt["expect"],
                "finish_reason": judged.finish_reason,
                **judged.row(),
            },
        )
        problems += judged.problems(prompt["id"])
    claim("known_answers_correct", "deterministic_verdicts.jsonl", op="all", field="correct")
    claim(
        "answers_identical_over_repeats",
        "deterministic_verdicts.jsonl",
        op="all",
        field="identical",
    )
    assert not problems, "\n".join(problems)
