"""Gate 04 — repetition.

Pass means: long generations (``max_tokens`` ≥ 512 where the model allows) on several prompts,
some longer than 64 tokens, are free of degenerate output by every measure — zlib compression
ratio, repeated n-gram fraction, a looping suffix, runs of one character or token. Short smoke
answers miss these faults (SGLang #24321, vLLM #47241), hence the long outputs. Reasoning counts as
output (a loop inside it is the same fault). Every output must end with a finish reason in
``finish_reasons`` (default ``stop`` or ``length``: a long output may hit its cap) and carry
visible text; one cut inside its reasoning fails as "reasoning budget exhausted". Artifacts:
the outputs and their metrics (``repetition_metrics.jsonl``).
"""

from __future__ import annotations

import pytest

from tp2qual.checks.answers import output_text
from tp2qual.checks.repetition import Thresholds, judge_long_output
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer, chat_body

pytestmark = pytest.mark.repetition


def test_long_outputs_are_not_degenerate(
    api: Api, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    settings = candidate.gate("repetition")
    assert settings["prompts"], "the candidate names no repetition prompts"
    thresholds = Thresholds.from_mapping(settings["thresholds"])
    problems = []
    for i, prompt in enumerate(settings["prompts"]):
        body = chat_body(candidate, prompt, max_tokens=settings["max_tokens"])
        reply = api.chat(f"long#{i}", body)
        assert reply.status == 200, f"prompt {i}: HTTP {reply.status}: {reply.body}"
        text = output_text(reply.message)
        verdict = judge_long_output(
            reply.message, reply.finish_reason, thresholds, settings["finish_reasons"]
        )
        record.evidence.append_jsonl(
            "repetition_metrics.jsonl",
            {
                "prompt": i,
                "prompt_words": len(prompt.split()),
                "ok": verdict.ok,
                "reason": verdict.reason,
                "completion_tokens": (reply.body.get("usage") or {}).get("completion_tokens"),
                "finish_reason": reply.finish_reason,
                **verdict.measures,
            },
        )
        if not verdict.ok:
            problems.append(f"prompt {i}: {verdict.reason}; output starts {text[:80]!r}")
    claim("long_outputs_clean", "repetition_metrics.jsonl", op="all", field="ok")
    claim("long_outputs", "repetition_metrics.jsonl", op="count")
    assert not problems, "\n".join(problems)
