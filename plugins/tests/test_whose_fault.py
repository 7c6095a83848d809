"""Whose fault a failure is, and how long a request may take: real inner runs on the real engine.

* A bug in the suite (an exception, a warning turned error, or a plain ``assert`` inside a gate's
  helper) makes the gate ERROR with its traceback kept, the verdict ERROR, the later gates
  blocked "(suite error)" — never a FAIL in the candidate's dated finding — and ``verify``
  accepts the run. An assertion blames the candidate only when a gate module's own code raised
  it (``hooks/gating.raised_in_a_gate``).
* Neither is the host's state nor the suite's own look-up: a port another process holds, a
  throughput floor this run's evidence cannot derive, a ``/version`` look-up that times out
  (vLLM behind the proxy's ``version_hang``) are each a suite ERROR, never a FAIL; llama.cpp's
  version is read in the engine's own Python (``launch.python``), not the suite's.
* A correct but slow serve (the proxy's ``slow_decode``) passes every functional gate and fails
  the throughput gate against its floor, not earlier.
* A request that outlives its time budget is a ``ResponseTimeout`` naming what was asked, what
  was allowed, that the server is alive and its last log line.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from test_faults import (
    MAIN,
    Inner,
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

# Loaded into the inner run with -p, replacing a helper gate 03 calls (so the bug is raised in
# the suite's code, under the gate).
BUGS = {
    "exception": "raise TypeError('injected suite bug: unsupported operand')",
    "warning": "warnings.warn(ResourceWarning('injected: unclosed socket')); return real(o)",
    "assertion": "assert o is None, 'injected: a plain assert in the suite'",
}
# Gate 03 reaches check_identical through checks.known_answers (its one rule, which verify runs
# too): the helper is replaced there, where the gate's call looks it up.
BUG_PLUGIN = """
import warnings
import tp2qual.checks.known_answers as known

real = known.check_identical

def broken(o):
    {body}

known.check_identical = broken
"""


def _inner_plugin(tmp_path: Path, body: str) -> None:
    (tmp_path / "inner_bug.py").write_text(BUG_PLUGIN.format(body=body))


def _verify(run_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tp2qual", "verify", str(run_dir)],
        cwd=MAIN, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def assert_suite_error(inner: Inner, name: str, gate: str, words: str) -> dict:
    """The candidate's verdict is ERROR at ``gate`` with ``words`` in its reason or traceback,
    no gate FAILED, every later gate blocked "(suite error)", and ``verify`` accepts the run."""
    finding = inner.finding(name)
    outcomes = {g: r["outcome"] for g, r in finding["gates"].items()}
    assert finding["verdict"] == "ERROR", (outcomes, inner.output())
    assert finding["failed_gate"] is None and "failed" not in outcomes.values(), outcomes
    assert finding["suite_error_gate"] == gate, outcomes
    result = finding["gates"][gate]
    assert result["reason"].startswith("suite error (not the candidate's fault)"), result
    traceback = (inner.evidence(name) / result["error_artifact"]).read_text()
    assert words in result["reason"] or words in traceback, (result["reason"], traceback[-2000:])
    for later in GATES[GATES.index(gate) + 1 :]:
        if outcomes[later] == "not_run" or later in inner_spec_not_applicable(finding):
            continue  # deselected by -m, or declared not applicable by the copy
        assert outcomes[later] == "blocked", outcomes
        assert finding["gates"][later]["reason"] == f"blocked by {gate} (suite error)"
    assert "ERROR      " + name in inner.proc.stdout, inner.output()
    assert "not the candidate's fault" in inner.proc.stdout, inner.output()
    checked = _verify(inner.run_dir)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return finding


@pytest.mark.parametrize("bug", list(BUGS))
def test_a_suite_bug_is_error_never_the_candidates_fail(bug: str, tmp_path: Path) -> None:
    name = f"suite-bug-{bug}"
    write_candidate(tmp_path / "candidates", smollm2_spec(name))
    _inner_plugin(tmp_path, BUGS[bug])
    inner = run_inner(tmp_path, [name], "-p", "inner_bug", "-m", "not repetition")
    assert_suite_error(inner, name, "deterministic", "injected")
    report = (inner.run_dir / "report.html").read_text()
    assert "Suite error — not a finding about the candidate" in report
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


def test_a_busy_port_is_a_suite_error_before_anything_starts(tmp_path: Path) -> None:
    name = "busy-port"
    with socket.socket() as holder:  # another process's server, as far as the suite can tell
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        spec = smollm2_spec(name)
        spec["launch"]["port"] = port
        write_candidate(tmp_path / "candidates", spec)
        inner = run_inner(tmp_path, [name], "-m", "preflight or model_list")
    finding = assert_suite_error(inner, name, "model_list", f"port {port} on 127.0.0.1")
    assert "PortInUse" in finding["gates"]["model_list"]["reason"], finding
    assert "nothing was started" in finding["gates"]["model_list"]["reason"]
    assert finding["gates"]["preflight"]["outcome"] == "passed", finding["gates"]["preflight"]
    assert json.loads((inner.evidence(name) / "launch.json").read_text()).get("pid") is None


def test_a_floor_the_run_cannot_derive_is_a_suite_error(tmp_path: Path) -> None:
    """A floor derived of a TP1 baseline whose finding is not there: the samples are taken, the
    floor has no basis, so the throughput gate is not judged — a suite error, not a FAIL."""
    name = "floor-not-derived"
    spec = smollm2_spec(name)
    spec["baseline"] = {
        "date": "2026-11-30",
        "source": "self-test: a finding that was never written",
        "finding": str(tmp_path / "nowhere" / "finding.json"),
        "tp": 1,
    }
    spec["gates"]["throughput"]["derived_floors"] = {
        "decode_tok_s_mean": {"of": "baseline", "fraction": 0.5, "why": "half the TP1 rate"}
    }
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, [name], "-m", "throughput")
    finding = assert_suite_error(inner, name, "throughput", "floor(s) not derived, so not judged")
    reason = finding["gates"]["throughput"]["reason"]
    assert "SuiteError" in reason and "derived_floors.decode_tok_s_mean" in reason, reason
    assert (inner.evidence(name) / "throughput_samples.jsonl").exists()
    assert_nothing_left(inner, name)


@pytest.mark.vllm_server
def test_a_version_look_up_that_times_out_is_a_suite_error(tmp_path: Path) -> None:
    """vLLM behind the proxy's ``version_hang``: ``GET /version`` held 8 s, the suite's
    look-up gives up at 5 s. The version is unknown, not wrong: gate 02 is ERROR, not FAIL."""
    from test_tool_call_faults import vllm_spec

    name = "version-hang"
    spec = _slow(with_fault(vllm_spec(name), "version_hang"), 8.0)
    spec["launch"]["readiness_timeout_s"] = 420  # vLLM's own start budget
    write_candidate(tmp_path / "candidates", spec)
    inner = run_inner(tmp_path, [name], "-m", "preflight or model_list")
    finding = assert_suite_error(inner, name, "model_list", "GET /version did not answer within")
    assert "LookupTimedOut" in finding["gates"]["model_list"]["reason"], finding
    log = (inner.evidence(name) / "server.log").read_text()
    assert "fault version_hang: holding /version" in log, log[-2000:]
    assert_nothing_left(inner, name)
