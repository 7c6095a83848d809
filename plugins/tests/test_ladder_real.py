"""The context ladder on a real tensor-parallel-2 serve: vLLM 0.32.0's CPU engine, two ranks over
gloo, qualified by one real inner ``pytest`` run up to gate 06.

The candidate is a process copy of ``smollm2-135m-vllm-tp2`` (``tp2_spec``: the same engine,
command, padded model and ``--enforce-eager``), gates 03-05, 07 and 08 not applicable and gate
01's probe deselected, so the run is the serve's start, its model list and gate 06. From the
inner run: gate 06 passes; ``capacity_ladder.jsonl`` holds one row per planned rung
(``perf.ladder.ladder_plan`` at the 2,048-token bound: 1/8, 1/2 and the needle's 0.9), each
with the prompt tokens vLLM's stream reported, both TTFTs, the effective prefill and decode
rates and the needle found; the report shows the ladder's table and plots; and ``verify``
re-derives every row from the raw streams.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_faults import run_inner
from test_tp2_serve_faults import NO_PROBE, runnable, tp2_spec

from tp2qual.artifacts.layout import REPORT
from tp2qual.candidate import GATES
from tp2qual.perf.ladder import LADDER_FILE, ladder_plan

# CI proves the same on the shipped lane in its container (.ci/run's vLLM stage): vllm_stage.
pytestmark = [pytest.mark.slow, pytest.mark.vllm_server, pytest.mark.vllm_stage]

NAME = "ladder-tp2"
SKIPPED = ("deterministic", "repetition", "tool_calls", "agreement", "throughput")


def test_the_ladder_rows_are_in_the_evidence_the_report_and_verify(tmp_path: Path) -> None:
    spec = tp2_spec(NAME, readiness_timeout_s=420)
    spec["gates"]["not_applicable"] = {
        gate: "self-test of gate 06's ladder: only the serve's start and gate 06 are proved"
        for gate in SKIPPED
    }
    runnable(tmp_path, spec)
    inner = run_inner(tmp_path, [f"{NAME} and {NO_PROBE}"])

    finding = inner.finding(NAME)
    outcomes = {g: r["outcome"] for g, r in finding["gates"].items()}
    assert outcomes["capacity"] == "passed", (outcomes, inner.output()[-3000:])
    assert set(outcomes) == set(GATES)

    settings = json.loads((inner.evidence(NAME) / "identity" / "candidate.json").read_text())
    plan = ladder_plan(2048, settings["gates"]["capacity"])
    rows = [json.loads(x) for x in (inner.evidence(NAME) / LADDER_FILE).read_text().splitlines()]
    assert sorted(r["tag"] for r in rows) == sorted(r.tag for r in plan.rungs)
    for row in rows:
        print(
            f"\n{row['tag']}: {row['prompt_tokens']} prompt tokens ({row['prompt_tokens_from']}), "
            f"TTFT {row['ttft_output_s']:.3f} s (visible {row['ttft_visible_s']:.3f} s), "
            f"prefill {row['prefill_tok_s_effective']:.0f} tok/s effective, decode "
            f"{row['decode_tok_s']} tok/s over {row['output_tokens']} tokens, "
            f"needle {row['needle_found']}"
        )
        assert row["needle_found"] and row["prompt_tokens_from"] == "stream usage", row
        assert row["ttft_output_s"] > 0 and row["prefill_tok_s_effective"] > 0, row

    html = (inner.run_dir / REPORT).read_text()
    assert "Context ladder (gate 06)" in html
    for row in rows:
        assert f"<td>{row['tag']}</td>" in html
    assert "TTFT of each ladder row against its prompt tokens" in html

    verified = inner.verify()
    assert verified.returncode == 0, verified.stdout + verified.stderr
    print(verified.stdout.strip().splitlines()[-1])
