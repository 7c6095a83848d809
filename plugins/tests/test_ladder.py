"""Gate 06's context ladder, pure (``perf/ladder.py``): the rows it plans at each bound, the
figures one streamed row gives, and the rows that fail. No server."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tp2qual.candidate import GATE_DEFAULTS
from tp2qual.checks.needle import fits_beside, judge_needle, needle_plan
from tp2qual.evidence.ladder_view import ladder_view
from tp2qual.evidence.rederive import GateRun, capacity
from tp2qual.perf.ladder import (
    LADDER_FILE,
    NEEDLE_TAG,
    ladder_misses,
    ladder_plan,
    ladder_row,
    prompt_count,
    stream_message,
)

SMOL = GATE_DEFAULTS["capacity"]  # fractions 1/8 and 1/2 beside the needle's 0.9
CAMPAIGN = SMOL | {"needle_max_tokens": 4096, "ladder_tokens": [32768, 131072, 245760]}


def sizes(bound: int, settings: dict[str, Any]) -> list[tuple[str, int, tuple[str, ...]]]:
    return [(r.tag, r.prompt_tokens, r.asked) for r in ladder_plan(bound, settings).rungs]


def test_smollm2_ladder_fits_its_2048_bound() -> None:
    assert sizes(2048, SMOL) == [
        ("ladder-256", 256, ("1/8 of the bound",)),
        ("ladder-1024", 1024, ("1/2 of the bound",)),
        (NEEDLE_TAG, 1843, ("fill 0.9",)),
    ]


def test_campaign_262k_ladder_merges_240k_into_the_needle_row() -> None:
    got = sizes(262144, CAMPAIGN)
    assert [t for t, _, _ in got] == ["ladder-32768", "ladder-131072", NEEDLE_TAG]
    # 1/8 is exactly 32K and 1/2 exactly 128K: one row each, both askers named
    assert got[0][2] == ("32,768 tokens", "1/8 of the bound")
    assert got[1][2] == ("131,072 tokens", "1/2 of the bound")
    # 240K is capped at what fits beside the budget, within 10 % of the needle's 0.9: one row
    assert got[2] == (NEEDLE_TAG, 235929, ("fill 0.9", "245,760 tokens"))


def test_absolute_rows_over_the_bound_are_skipped_and_said() -> None:
    plan = ladder_plan(32768, CAMPAIGN)
    assert plan.skipped == (
        "131,072 tokens: over the 32,768-token bound",
        "245,760 tokens: over the 32,768-token bound",
    )
    top = needle_plan(32768, CAMPAIGN).prompt_tokens
    assert max(r.prompt_tokens for r in plan.rungs) == top == fits_beside(32768, 4096)
    assert [r.tag for r in plan.rungs] == ["ladder-4096", "ladder-16384", NEEDLE_TAG]


@pytest.mark.parametrize("bound", [2048, 7168, 32768, 65536, 131072, 262144, 1048576])
def test_no_row_is_larger_than_fits_and_none_are_near_duplicates(bound: int) -> None:
    rungs = ladder_plan(bound, CAMPAIGN).rungs
    fits = fits_beside(bound, 4096)
    assert all(0 < r.prompt_tokens <= max(fits, 1) for r in rungs)
    for a, b in itertools.pairwise(rungs):
        assert b.prompt_tokens - a.prompt_tokens > 0.1 * b.prompt_tokens, (a, b)


def chunk(t_content: str = "", reasoning: str = "", finish: str | None = None) -> dict:
    delta = {k: v for k, v in (("content", t_content), ("reasoning_content", reasoning)) if v}
    return {"choices": [{"delta": delta, "finish_reason": finish}]}


def stream(usage: dict | None = None) -> tuple[list[dict], list[float]]:
    chunks = [
        chunk(),
        chunk(reasoning="think"),
        chunk("Lis"),
        chunk("bon"),
        chunk(".", finish="stop"),
    ]
    if usage:
        chunks.append({"choices": [], "usage": usage})
    return chunks, [0.1, 2.0, 2.5, 2.6, 3.0] + ([3.0] if usage else [])


def test_one_row_measures_ttfo_visible_prefill_and_decode() -> None:
    chunks, times = stream({"prompt_tokens": 1800, "completion_tokens": 5})
    rung = ladder_plan(2048, SMOL).rungs[-1]
    prompt = prompt_count(chunks, None)
    assert prompt == (1800, "stream usage")
    row = ladder_row(rung, chunks, times, prompt, 2048, SMOL)
    assert row["ttft_output_s"] == 2.0 and row["ttft_visible_s"] == 2.5
    assert row["prefill_tok_s_effective"] == 900.0  # 1800 tokens / 2.0 s, queueing included
    assert row["decode_tok_s"] == pytest.approx(4 / 1.0)  # 5 tokens, first to last output 1 s
    assert (row["needle_found"], row["answer"], row["fill"]) == (True, "Lisbon.", 1800 / 2048)
    assert ladder_misses([row]) == []


def test_a_row_without_stream_usage_is_counted_by_its_plain_request() -> None:
    chunks, times = stream()
    counted = {"status": 200, "response": {"usage": {"prompt_tokens": 1790}}}
    assert prompt_count(chunks, counted) == (1790, "count request")
    assert prompt_count(chunks, None) == (None, "not reported")
    row = ladder_row(ladder_plan(2048, SMOL).rungs[0], chunks, times, (None, "not reported"),
                     2048, SMOL)  # fmt: skip
    assert row["prefill_tok_s_effective"] is None and row["output_tokens_from"] == "chunks"


def test_a_missed_needle_fails_with_its_row_named() -> None:
    chunks = [chunk("Paris", finish="stop"), {"choices": [], "usage": {"prompt_tokens": 250}}]
    rung = ladder_plan(2048, SMOL).rungs[0]
    row = ladder_row(rung, chunks, [1.0, 1.0], prompt_count(chunks, None), 2048, SMOL)
    assert row["needle_found"] is False and row["decode_tok_s"] is None
    (missed,) = ladder_misses([row])
    assert missed.startswith("ladder-256 (250 prompt tokens): ") and "Lisbon" in missed


def test_plan_counts_every_ladder_row_at_most() -> None:
    from tp2qual.perf.estimate import _capacity

    load = _capacity(CAMPAIGN | {"stream_over_bound": True}, [])
    rows = 1 + 2 + 3  # the needle's, two fractions, three absolute sizes (before any merge)
    assert (load.requests, load.tokens) == (2 + 2 * rows + 3, rows * 4097 + 10)


def _recorded(root: Path, tamper: dict[str, Any] | None = None) -> GateRun:
    """A gate 06 run as the gate writes it: the calibration-free part, one stream per rung (the
    needle's without usage, counted by its plain request), its rows and the needle's result."""
    settings = SMOL | {"needle_answer": "Lisbon"}
    raw, rows = [], []
    for n, rung in enumerate(ladder_plan(2048, settings).rungs):
        used = rung.prompt_tokens + 3
        chunks, times = stream(None if rung.tag == NEEDLE_TAG else {"prompt_tokens": used})
        pairs = [{"t": t + n, "data": c} for c, t in zip(chunks, times, strict=True)]
        raw.append({"tag": rung.tag, "status": 200, "chunks": pairs})
        counted = None
        if rung.tag == NEEDLE_TAG:
            counted = {"status": 200, "response": {"usage": {"prompt_tokens": used}}}
            raw.append({"tag": "needle-count", **counted})
        got = ([c["data"] for c in pairs], [c["t"] for c in pairs])
        rows.append(ladder_row(rung, *got, prompt_count(got[0], counted), 2048, settings))
    rows[0] |= tamper or {}
    needle = judge_needle(stream_message(chunks), "stop", used, 2048, settings)[0]
    (root / "capacity.jsonl").write_text("".join(json.dumps(x) + "\n" for x in raw))
    (root / LADDER_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "capacity_results.jsonl").write_text(json.dumps({"check": "needle", **needle}) + "\n")
    return GateRun(root, settings, "vllm", 2048)


def test_verify_rederives_every_ladder_row_from_its_stream(tmp_path: Path) -> None:
    got = capacity(_recorded(tmp_path))
    assert got.mismatches == [] and got.failures == ["check over_bound: no result"], got
    assert [r["prompt_tokens_from"] for r in got.rows[LADDER_FILE]] == [
        "stream usage", "stream usage", "count request",
    ]  # fmt: skip


def test_verify_names_a_ladder_row_that_says_more_than_its_stream(tmp_path: Path) -> None:
    got = capacity(_recorded(tmp_path, {"decode_tok_s": 99.0, "needle_found": False}))
    assert {(m.record, m.what) for m in got.mismatches} == {
        ("capacity.jsonl ladder-256", f"{LADDER_FILE} decode_tok_s"),
        ("capacity.jsonl ladder-256", f"{LADDER_FILE} needle_found"),
    }


def test_the_report_shows_the_ladder_as_a_table_and_plots(tmp_path: Path) -> None:
    _recorded(tmp_path)
    view = ladder_view(tmp_path)
    assert view is not None
    assert [row[0] for row in view.rows] == ["ladder-256", "ladder-1024", NEEDLE_TAG]
    assert [c.caption.split(" of ")[0] for c in view.charts] == [
        "TTFT", "effective prefill", "decode rate",
    ]  # fmt: skip
    assert ladder_view(tmp_path / "none") is None
