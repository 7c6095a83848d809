"""verify on gate 05's repeats, pure: every call re-judged from its own raw exchange, each mode's
power judged again from the calls as re-derived, a passed mode held to the calls its settings
asked, and the long call's fill taken from the raw reply's ``usage``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_verify import exchange

from tp2qual.checks.tool_modes import call_tag
from tp2qual.checks.tool_power import judge_repeats
from tp2qual.evidence.rederive import GateRun, tool_calls

N = 3
TOOL = {
    "name": "get_weather",
    "description": "Get the current weather for a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
SETTINGS = {
    "modes": ["auto", "named"],
    "tool": TOOL,
    "arguments_expect": {"city": "Paris"},
    "result_expect": ["18"],
    "repeats": N,
    "max_failure_rate": 0.2,
    "long_fill": 0.5,
}


def _call(tag: str, city: object = "Paris", **response: Any) -> dict[str, Any]:
    function = {"name": "get_weather", "arguments": json.dumps({"city": city})}
    call = {"id": "call_0", "type": "function", "function": function}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return exchange(tag, message, "tool_calls", **response)


def _write(root: Path, name: str, rows: list[dict[str, Any]]) -> None:
    (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))


def _run(root: Path, *, calls: int = N, bad: tuple[str, ...] = (), used: int = 1100) -> GateRun:
    """A passed gate 05 as the gate records it: ``calls`` per mode, ``bad`` tags' raw
    arguments changed afterwards (the verdicts still say ok)."""
    raw, verdicts, power = [], [], []
    for mode in ("auto", "named"):
        for k in range(1, calls + 1):
            tag = call_tag(mode, k)
            raw.append(_call(tag, 42 if tag in bad else "Paris"))
            verdicts.append({"mode": mode, "repeat": k, "tag": tag, "ok": True, "problems": []})
        power.append({"ok": True, **judge_repeats(mode, [[]] * calls, 0.2).measures})
    raw.append(_call("long", usage={"prompt_tokens": used, "completion_tokens": 9}))
    verdicts.append({"mode": "long", "tag": "long", "base": "named", "prompt_tokens": 1100,
                     "fill": 0.5371, "ok": True, "problems": []})  # fmt: skip
    _write(root, "tool_calls.jsonl", raw)
    _write(root, "tool_calls_verdicts.jsonl", verdicts)
    _write(root, "tool_calls_power.jsonl", power)
    return GateRun(root, SETTINGS, "llama.cpp", 2048)


def test_a_consistent_run_rederives_every_call(tmp_path: Path) -> None:
    out = tool_calls(_run(tmp_path))
    assert not out.mismatches and not out.failures, (out.mismatches, out.failures)
    assert out.records == 2 * N + 1
    assert [r["calls"] for r in out.rows["tool_calls_power.jsonl"]] == [N, N]


def test_one_tampered_call_is_named_and_its_mode_power_falls(tmp_path: Path) -> None:
    out = tool_calls(_run(tmp_path, bad=("named#2",)))
    lines = [f"{m.record}: {m.line()}" for m in out.mismatches]
    tampered = "tool_calls_verdicts.jsonl ok recorded True, raw exchanges give False"
    assert f"tool_calls.jsonl named#2: {tampered}" in lines, lines
    power = [m for m in out.mismatches if m.record == "tool_calls_verdicts.jsonl named"]
    assert any(m.what == "tool_calls_power.jsonl ok" for m in power), lines
    failed = [f for f in out.failures if f.startswith("tool_calls_power.jsonl named: named: ")]
    assert failed and "[call #2; 1 of 3 calls failed" in failed[0], out.failures


def test_a_passed_mode_with_fewer_calls_than_asked_fails(tmp_path: Path) -> None:
    out = tool_calls(_run(tmp_path, calls=N - 1))
    assert not out.mismatches, out.mismatches
    assert "tool_calls_power.jsonl auto: 2 calls, 3 asked" in out.failures


def test_the_long_call_fill_comes_from_the_raw_usage(tmp_path: Path) -> None:
    out = tool_calls(_run(tmp_path, used=900))
    assert any(m.record == "tool_calls.jsonl long" and m.what.endswith("prompt_tokens")
               and m.rederived == 900 for m in out.mismatches), out.mismatches  # fmt: skip
    assert "tool_calls.jsonl long: long prompt of 900 tokens, 1024 wanted (50% of 2048)" in (
        out.failures
    )


def test_a_run_recorded_before_repeats_is_judged_as_it_was(tmp_path: Path) -> None:
    _write(tmp_path, "tool_calls.jsonl", [_call("auto"), _call("named")])
    _write(tmp_path, "tool_calls_verdicts.jsonl",
           [{"mode": m, "ok": True, "problems": []} for m in ("auto", "named")])  # fmt: skip
    old = {k: v for k, v in SETTINGS.items() if k not in ("repeats", "long_fill")}
    out = tool_calls(GateRun(tmp_path, old, "llama.cpp", 2048))
    assert not out.mismatches and not out.failures and out.records == 2
