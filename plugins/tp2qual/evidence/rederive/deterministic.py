"""Gate 03 (deterministic): each prompt's known answer and its repeats judged again.

From ``deterministic.jsonl``, the first repeat's answer is held to its token budget
(``checks.answers.check_budget``), its expected answer (``check_answer``) and, where the prompt
asks for it, reasoning kept apart (``check_reasoning_apart``); every repeat's answer must be the
same (``check_identical``). The rows re-derived are ``deterministic_verdicts.jsonl``'s.
"""

from __future__ import annotations

from typing import Any

from tp2qual.checks.answers import (
    check_answer,
    check_budget,
    check_identical,
    check_reasoning_apart,
    split_reasoning,
)
from tp2qual.evidence.rederive.common import (
    GateRun,
    Rederived,
    by_tag,
    finish_of,
    message_of,
    status_of,
)


def deterministic(run: GateRun) -> Rederived:
    raw = by_tag(run.records("deterministic.jsonl"))
    verdicts = run.records("deterministic_verdicts.jsonl", required=False)
    prompts = {p["id"]: p for p in run.settings.get("prompts", [])}
    out = Rederived(rows={"deterministic_verdicts.jsonl": []})
    for row in verdicts:
        prompt = prompts.get(row.get("id"))
        if prompt is None:
            out.unmatched(
                f"deterministic_verdicts.jsonl id={row.get('id')}", "deterministic_verdicts.jsonl",
                row, what="prompt", found="no such prompt in the recorded candidate",
            )  # fmt: skip
            continue
        tags = [f"{prompt['id']}#{i}" for i in range(run.settings["repeats"])]
        exchanges = [raw.get(t) for t in tags]
        missing = [t for t, x in zip(tags, exchanges, strict=True) if status_of(x) != 200]
        if missing:
            out.unmatched(
                f"deterministic.jsonl {missing[0]}", "deterministic_verdicts.jsonl", row,
                what="exchange", found="no HTTP 200 answer",
            )  # fmt: skip
            continue
        out.records += len(exchanges)
        new = _judge_prompt(prompt, [x for x in exchanges if x], run.settings["max_tokens"])
        out.compare(f"deterministic.jsonl {tags[0]}", "deterministic_verdicts.jsonl", row, **new)
        out.rows["deterministic_verdicts.jsonl"].append({**row, **new})
        for key in ("correct", "identical"):
            if not new[key]:
                out.failures.append(f"deterministic.jsonl {tags[0]}: {prompt['id']} not {key}")
    judged = {r.get("id") for r in verdicts}
    out.failures += [f"prompt {p}: no verdict" for p in prompts if p not in judged]
    return out


def _judge_prompt(prompt: dict[str, Any], exchanges: list[dict[str, Any]], budget: int) -> dict:
    """What gate 03 decides for one prompt, from its repeats' raw answers."""
    split = [split_reasoning(message_of(x)) for x in exchanges]
    answers = [a for a, _ in split]
    answer, reasoning = split[0]
    verdict = check_budget(answer, reasoning, finish_of(exchanges[0]), budget)
    if verdict.ok:
        verdict = check_answer(answer, prompt["expect"], prompt.get("mode", "contains"))
    if prompt.get("expect_reasoning") and verdict.ok:
        verdict = check_reasoning_apart(answer, reasoning)
    return {
        "answer": answer,
        "correct": verdict.ok,
        "identical": check_identical(answers).ok,
        "repeats": len(answers),
    }
