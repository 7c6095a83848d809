"""Gate 03 — deterministic known answers.

Pass means: at temperature 0 with a fixed seed, every known-answer prompt is answered correctly
(normalised match; reasoning kept apart from the answer) and byte-identically on every repeat.
Artifacts: every request and response (``deterministic.jsonl``) and one verdict per prompt
(``deterministic_verdicts.jsonl``).
"""

from __future__ import annotations

import pytest

from tp2qual.checks.answers import check_answer, check_identical, split_reasoning

pytestmark = pytest.mark.deterministic


def _body(candidate, prompt: dict, settings: dict) -> dict:
    messages = [{"role": "system", "content": prompt["system"]}] if "system" in prompt else []
    return {
        "model": candidate.served_name,
        "messages": [*messages, {"role": "user", "content": prompt["prompt"]}],
        "temperature": 0,
        "seed": settings["seed"],
        "max_tokens": settings["max_tokens"],
    }


def test_known_answers_correct_and_identical(api, candidate, record, claim):
    settings = candidate.gate("deterministic")
    assert settings["prompts"], "the candidate names no known-answer prompts"
    problems = []
    for prompt in settings["prompts"]:
        answers, reasonings = [], []
        for i in range(settings["repeats"]):
            reply = api.chat(f"{prompt['id']}#{i}", _body(candidate, prompt, settings))
            assert reply.status == 200, f"{prompt['id']}: HTTP {reply.status}: {reply.body}"
            answer, reasoning = split_reasoning(reply.message)
            answers.append(answer)
            reasonings.append(reasoning)
        correct = check_answer(answers[0], prompt["expect"], prompt.get("mode", "contains"))
        identical = check_identical(answers)
        record.evidence.append_jsonl(
            "deterministic_verdicts.jsonl",
            {
                "id": prompt["id"],
                "answer": answers[0],
                "reasoning": reasonings[0],
                "expect": prompt["expect"],
                "correct": correct.ok,
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
