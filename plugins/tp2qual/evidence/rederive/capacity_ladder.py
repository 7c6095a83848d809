"""Gate 06's context ladder judged again: ``capacity_ladder.jsonl`` from ``capacity.jsonl``.

Each recorded row's plan (its size and what asked for it) is planned again from the settings the
run recorded (``perf.ladder.ladder_plan``), and its figures (prompt tokens, both TTFTs, the
effective prefill and decode rates, the needle) measured again from its raw stream by the gate's
own ``perf.ladder.ladder_row``. A row whose needle is missed fails; a planned row with no
record fails where the run recorded a ladder at all (a run from before the ladder has none).
"""

from __future__ import annotations

from typing import Any

from tp2qual.evidence.rederive.common import GateRun, Rederived, chunks_of
from tp2qual.perf.ladder import (
    COUNT_SUFFIX,
    LADDER_FILE,
    ladder_misses,
    ladder_plan,
    ladder_row,
    prompt_count,
)

FIGURES = (
    "prompt_tokens", "prompt_tokens_from", "fill", "ttft_output_s", "ttft_visible_s",
    "prefill_tok_s_effective", "decode_tok_s", "output_tokens", "finish_reason", "needle_found",
)  # fmt: skip


def ladder(run: GateRun, raw: dict[str, dict[str, Any]], out: Rederived) -> None:
    rows = run.records(LADDER_FILE, required=False)
    if not rows:
        return
    out.rows[LADDER_FILE] = []
    planned = {r.tag: r for r in ladder_plan(run.max_model_len, run.settings).rungs}
    for row in rows:
        tag = str(row.get("tag"))
        rung, exchange = planned.get(tag), raw.get(tag)
        record = f"capacity.jsonl {tag}"
        if rung is None or exchange is None or exchange.get("status") != 200:
            found = "no such row in the plan" if rung is None else "no streamed answer"
            out.unmatched(record, LADDER_FILE, row, what="exchange", found=found, recorded="a row")
            continue
        out.records += 1
        chunks, times = chunks_of(exchange)
        counted = raw.get(tag + COUNT_SUFFIX)
        prompt = prompt_count(chunks, counted)
        new = ladder_row(rung, chunks, times, prompt, run.max_model_len, run.settings)
        plan = {"planned_tokens": rung.prompt_tokens, "asked": list(rung.asked)}
        out.compare(record, LADDER_FILE, row, **plan, **{k: new[k] for k in FIGURES})
        out.rows[LADDER_FILE].append({**row, **new})
    out.failures += [f"capacity.jsonl {m}" for m in ladder_misses(out.rows[LADDER_FILE])]
    seen = {str(r.get("tag")) for r in rows}
    out.failures += [f"ladder row {t}: no result" for t in planned if t not in seen]
