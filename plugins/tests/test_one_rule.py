"""One rule, one copy: the gate and ``verify`` decide by the same pure function, so a decision
the gate made re-derives from its raw record as made — also where the two copies used to part.

* Gate 05 compares a streamed call with its non-streamed twin after an argument mismatch too
  (``checks.tool_modes.judge_mode``); verify did not, so a real double failure was a mismatch.
  On vLLM 0.32.0's own recorded answers (plugins/tests/data/vllm-0.32.0/).
* Gate 06's needle fill rule (``checks.needle.fill_reaches``): the gate, verify's failure and
  the claim rule of a passed gate draw the same line.
* Gate 08's output-token count (``perf.sampling.output_tokens``): usage, else the server's
  tokenizer, else content chunks, and verify counts the recorded stream the same way.
* Gate 03's decision for a prompt (``checks.known_answers.judge_known_answer``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tp2qual.checks.known_answers import judge_known_answer
from tp2qual.checks.needle import FILL_SLACK, fill_reaches, judge_needle, needle_plan
from tp2qual.checks.tool_modes import judge_mode, twin_tag
from tp2qual.checks.toolcalls import reassemble_stream
from tp2qual.evidence.rederive import GateRun, capacity, supports_pass, throughput, tool_calls
from tp2qual.perf.sampling import output_tokens

VLLM = Path(__file__).with_name("data") / "vllm-0.32.0"
TOOL = json.loads((VLLM / "tool-named.json").read_text())["request"]["tools"][0]["function"]
TOOL_SETTINGS = {
    "tool": TOOL,
    "modes": ["named", "named-stream"],
    "arguments_expect": {"city": "Berlin"},  # the recorded calls ask for Paris
}


def _recorded(name: str) -> dict[str, Any]:
    return json.loads((VLLM / name).read_text())


def _twin_asking_for(city: str) -> dict[str, Any]:
    twin = _recorded("tool-named.json")
    call = twin["response"]["choices"][0]["message"]["tool_calls"][0]
    call["function"]["arguments"] = json.dumps({"city": city})
    return twin


def _tool_records(root: Path, twin: dict[str, Any]) -> dict[str, dict[str, Any]]:
    stream = _recorded("tool-named-stream.json")
    chunks = [c for c in stream["chunks"] if isinstance(c, dict)]  # "[DONE]" is no chunk
    raw = {
        "named": {"tag": "named", **_recorded("tool-named.json")},
        "named-stream": {
            "tag": "named-stream",
            "status": stream["status"],
            "chunks": [{"t": 0.01 * i, "data": c} for i, c in enumerate(chunks)],
        },
        twin_tag("named-stream"): {"tag": twin_tag("named-stream"), **twin},
    }
    (root / "tool_calls.jsonl").write_text("".join(json.dumps(r) + "\n" for r in raw.values()))
    return raw


def _gate_rows(raw: dict[str, dict[str, Any]], twin: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows gate 05 writes for these answers (test_05's own calls of the rule)."""
    named = raw["named"]["response"]["choices"][0]
    streamed = reassemble_stream([c["data"] for c in raw["named-stream"]["chunks"]])
    rows = []
    for mode, got in (
        ("named", {"tool_calls": named["message"]["tool_calls"], "finish_reason": "stop"}),
        ("named-stream", streamed),
    ):
        verdict, problems = judge_mode(
            mode, got, TOOL_SETTINGS, "vllm", lambda: (twin["status"], twin["response"])
        )
        assert verdict.ok, verdict.reason  # the calls themselves are well formed
        rows.append({"mode": mode, "ok": not problems, "problems": problems, **verdict.measures})
    return rows


def test_the_twin_is_compared_after_an_argument_mismatch_in_gate_and_verify(
    tmp_path: Path,
) -> None:
    twin = _twin_asking_for("Lyon")  # the twin answers another call than the stream
    raw = _tool_records(tmp_path, twin)
    rows = _gate_rows(raw, twin)
    stream_problems = rows[1]["problems"]
    assert len(stream_problems) == 2, stream_problems  # both failures, reported whole
    assert "does not contain 'Berlin'" in stream_problems[0]
    assert "arguments differ" in stream_problems[1]
    (tmp_path / "tool_calls_verdicts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = tool_calls(GateRun(tmp_path, TOOL_SETTINGS, "vllm", 2048))
    assert got.mismatches == [], [m.line() for m in got.mismatches]
    assert [f.split(": ", 1)[1] for f in got.failures] == [*rows[0]["problems"], *stream_problems]


@pytest.mark.parametrize(
    ("bound", "budget", "fill", "reaches"),
    [
        (2048, 16, 0.9, True), (2048, 16, 0.8501, True), (2048, 16, 0.849, False),
        # the campaign's 4096-token budget: the plan wants what fits (0.825 at 32k, 0.8875 at
        # 64k, 0.9 at 262k), and the line sits FILL_SLACK under it
        (32768, 4096, 0.7751, True), (32768, 4096, 0.7749, False),
        (65536, 4096, 0.8376, True), (65536, 4096, 0.8374, False),
        (262144, 4096, 0.8501, True), (262144, 4096, 0.8499, False),
    ],
)  # fmt: skip
def test_the_needle_fill_line_is_one_line(
    tmp_path: Path, bound: int, budget: int, fill: float, reaches: bool
) -> None:
    settings = {"fill": 0.9, "needle_max_tokens": budget}
    wanted = needle_plan(bound, settings).wanted_fill
    assert fill_reaches(fill, wanted) is reaches
    answer = {"role": "assistant", "content": "Lisbon."}
    row, wrong = judge_needle(answer, "stop", round(fill * bound), bound, settings)
    assert row["ok"] and not wrong and row["expect"] == "Lisbon"
    assert row["fill_wanted"] == wanted and row["fill_reached"] is reaches
    assert supports_pass("needle_fill_reached", row["fill_reached"], settings) is reaches
    (tmp_path / "capacity.jsonl").write_text(json.dumps(_needle_exchange(round(fill * bound))))
    (tmp_path / "capacity_results.jsonl").write_text(json.dumps({"check": "needle", **row}))
    got = capacity(GateRun(tmp_path, settings, "vllm", bound))
    assert got.mismatches == [], [m.line() for m in got.mismatches]
    short = [f for f in got.failures if "filled only" in f]
    assert bool(short) is not reaches  # verify draws the gate's line
    assert fill_reaches(row["fill"], wanted) is (row["fill"] >= wanted - FILL_SLACK)


def _needle_exchange(prompt_tokens: int) -> dict[str, Any]:
    reply = {
        "choices": [
            {"message": {"role": "assistant", "content": "Lisbon."}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": prompt_tokens},
    }
    return {"tag": "needle", "status": 200, "response": reply}  # fmt: skip


def test_output_tokens_are_counted_one_way(tmp_path: Path) -> None:
    content = [{"choices": [{"delta": {"content": w}}]} for w in ("Once", " upon", " a")]
    usage = {"completion_tokens": 7}
    assert output_tokens(usage, (200, {"tokens": [1, 2]}), content) == (7, "usage")
    assert output_tokens(None, (200, {"tokens": [1, 2]}), content) == (2, "server_tokenizer")
    assert output_tokens({"completion_tokens": 0}, (500, "no"), content) == (3, "chunks")
    assert output_tokens(None, (200, "<html>"), content) == (3, "chunks")
    # verify counts a recorded stream followed by its tokenize exchange the same way
    stream = {
        "tag": "sample#0",
        "status": 200,
        "chunks": [{"t": 0.1 * (i + 1), "data": c} for i, c in enumerate(content)],
    }
    tokenize = {"tag": "tokenize", "status": 200, "response": {"tokens": [5, 6, 7, 8]}}
    (tmp_path / "throughput.jsonl").write_text(json.dumps(stream) + "\n" + json.dumps(tokenize))
    row = {"phase": "sample", "i": 0, "ok": True, "output_tokens": 4}
    (tmp_path / "throughput_samples.jsonl").write_text(json.dumps(row) + "\n")
    got = throughput(GateRun(tmp_path, {"samples": 1}, "llama.cpp", 2048))
    derived = got.rows["throughput_samples.jsonl"][0]
    assert (derived["output_tokens"], derived["token_count_method"]) == (4, "server_tokenizer")


def test_a_known_answer_is_judged_budget_first_then_answer_then_repeats() -> None:
    prompt = {"id": "capital", "expect": ["Paris"], "expect_reasoning": False}
    cut = {"role": "assistant", "content": None, "reasoning": "Let me think about France"}
    judged = judge_known_answer(prompt, [(cut, "length"), (cut, "length")], 32)
    assert not judged.correct.ok and "budget ended inside reasoning" in judged.correct.reason
    right = {"role": "assistant", "content": "Paris."}
    other = {"role": "assistant", "content": "Paris, of course."}
    judged = judge_known_answer(prompt, [(right, "stop"), (other, "stop")], 32)
    assert judged.correct.ok and not judged.identical.ok
    assert judged.row() == {"answer": "Paris.", "correct": True, "identical": False, "repeats": 2}
    assert judged.problems("capital")[0].startswith("capital: ")
