"""Gate 03 (deterministic): each prompt's known answer and its repeats judged again.

From ``deterministic.jsonl``, each prompt's repeats are judged by the gate's own rule
(``checks.known_answers.judge_known_answer``: budget, expected answer, reasoning kept apart,
every repeat the same). The rows re-derived are ``deterministic_verdicts.jsonl``'s.
"""

from __future__ import annotations

from tp2qual.checks.known_answers import judge_known_answer
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
        replies = [(message_of(x), finish_of(x)) for x in exchanges if x]
        # A run recorded before finish reasons were judged names none: its own rule (None).
        allowed = run.settings.get("finish_reasons")
        new = judge_known_answer(prompt, replies, run.settings["max_tokens"], allowed).row()
        out.compare(f"deterministic.jsonl {tags[0]}", "deterministic_verdicts.jsonl", row, **new)
        out.rows["deterministic_verdicts.jsonl"].append({**row, **new})
        for key in ("correct", "identical"):
            if not new[key]:
                out.failures.append(f"deterministic.jsonl {tags[0]}: {prompt['id']} not {key}")
    judged = {r.get("id") for r in verdicts}
    out.failures += [f"prompt {p}: no verdict" for p in prompts if p not in judged]
    return out
