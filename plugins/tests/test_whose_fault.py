"""Whose fault a failure is, and how long a request may take: real inner runs on the real engine.

* A bug in the suite (an exception, or a warning turned error, inside a gate's helper) makes the
  gate ERROR with its traceback kept, the verdict ERROR, the later gates blocked "(suite error)" —
  never a FAIL in the candidate's dated finding — and ``verify`` accepts the run.
* A correct but slow serve (the proxy's ``slow_decode``) passes every functional gate and fails
  the throughput gate against its floor, not earlier.
* A request that outlives its time budget is a ``ResponseTimeout`` naming what was asked, what
  was allowed, that the server is alive and its last log line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults import (
    MAIN,
    assert_failed_and_blocked,
    assert_nothing_left,
    inner_spec_not_applicable,
    run_inner,
    smollm2_spec,
    with_fault,
    write_candidate,
)

from tp2qual.candidate import GATES

pytestmark = pytest.mark.slow

# Loaded into the inner run with -p before any gate module is imported, so the gate's own
# ``from tp2qual.checks.answers import check_identical`` gets the broken helper.
BUGS = {
    "exception": "raise TypeError('injected suite bug: unsupported operand')",
    "warning": "warnings.warn(ResourceWarning('injected: unclosed socket')); return real(o)",
}
BUG_PLUGIN = """
import warnings
import tp2qual.checks.answers as answers

real = answers.check_identical

def broken(o):
    {body}

answers.check_identical = broken
"""


def _inner_plugin(tmp_path: Path, body: str) -> None:
    (tmp_path / "inner_bug.py").write_text(BUG_PLUGIN.format(body=body))


def _verify(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tp2qual", "verify", str(run_dir)],
        cwd=MAIN, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_suite_bug_is_error_never_the_candidates_fail(bug: str, tmp_path: Path) -> None:
    name = f"suite-bug-{bug}"
    write_candidate(tmp_path / "candidates", smollm2_spec(name))
    _inner_plugin(tmp_path, BUGS[bug])
    inner = run_inner(tmp_path, [name], "-p", "inner_bug", "-m", "not repetition")
    finding = inner.finding(name)
    outcomes = {g: r["outcome"] for g, r in finding["gates"].items()}
    assert finding["verdict"] == "ERROR", (outcomes, inner.output())
    assert finding["failed_gate"] is None and "failed" not in outcomes.values(), outcomes
    assert finding["suite_error_gate"] == "deterministic", outcomes
    result = finding["gates"]["deterministic"]
    assert result["reason"].startswith("suite error (not the candidate's fault)"), result
    traceback = (inner.evidence(name) / result["error_artifact"]).read_text()
    assert "injected" in traceback, traceback[-2000:]
    later = GATES[GATES.index("deterministic") + 1 :]
    for gate in later:
        if outcomes[gate] == "not_run" or gate in inner_spec_not_applicable(finding):
            continue  # deselected by -m, or declared not applicable by the copy
        assert outcomes[gate] == "blocked", outcomes
        assert finding["gates"][gate]["reason"] == "blocked by deterministic (suite error)"
    assert "ERROR      " + name in inner.proc.stdout, inner.output()
    assert "not the candidate's fault" in inner.proc.stdout, inner.output()
    report = (inner.run_dir / "report.html").read_text()
    assert "Suite error — not a finding about the candidate" in report
    checked = _verify(inner.run_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert_nothing_left(inner, name)


def _slow(spec: dict, delay_s: float) -> dict:
    command = spec["launch"]["command"]
    at = command.index("--fault") + 2
    spec["launch"]["command"] = [*command[:at], "--delay-s", str(delay_s), *command[at:]]
    return spec


def test_slow_but_correct_serve_fails_at_throughput_not_before(tmp_path: Path) -> None:
    name = "fault-slow-decode"
    spec = _slow(with_fault(smollm2_spec(name), "slow_decode"), 0.05)
    # ~15 tok/s through the proxy against a throughput floor of 30; the request budgets use a
    # floor of their own (serve.min_decode_tok_s) with room for other work on these 2 cores.
    spec["gates"]["throughput"]["floors"] = {"decode_tok_s_median": 30.0}
    spec["serve"].update(min_decode_tok_s=1.0, prefill_budget_s=300.0)
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, [name])
    finding = assert_failed_and_blocked(inner, name, "throughput")
    assert "decode_tok_s_median" in finding["gates"]["throughput"]["reason"], finding
    assert (inner.evidence(name) / "throughput_samples.jsonl").exists()
    assert_nothing_left(inner, name)


def test_a_request_past_its_budget_is_a_clear_timeout(tmp_path: Path) -> None:
    name = "fault-timeout"
    spec = _slow(with_fault(smollm2_spec(name), "slow_decode"), 0.5)
    spec["gates"]["deterministic"]["request_timeout_s"] = 2.0  # 32 tokens x 0.5 s: 16 s needed
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, [name])
    finding = assert_failed_and_blocked(inner, name, "deterministic")
    reason = finding["gates"]["deterministic"]["reason"]
    for text in ("ResponseTimeout", "no response within 2 s", "server alive", "last log line"):
        assert text in reason, reason
    exchanges = [
        json.loads(line)
        for line in (inner.evidence(name) / "deterministic.jsonl").read_text().splitlines()
    ]
    assert exchanges[-1]["timeout_s"] == 2.0 and "Timeout" in exchanges[-1]["error"]
    assert_nothing_left(inner, name)
