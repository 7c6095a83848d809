"""Faults of a real multi-rank serve: vLLM 0.32.0's CPU engine at tensor-parallel size 2 (two
worker processes joined over gloo), qualified by a real inner ``pytest`` run each.

The candidate is a process copy of ``smollm2-135m-vllm-tp2`` (the same engine, command, padded
model and ``--enforce-eager``; its container is what the TP2 qualification itself proves) with
the self-tests' small gate settings. Gate 01's probe is left out (``test_nccl_probe.py`` runs it
on gloo): the server under fault is what these runs prove. Per fault, from the inner run's
``finding.json`` and its own reports:

* a TP worker killed mid-gate (SIGKILL of rank 1's worker after gate 03's first answer): it FAILs
  with ``ServerDied`` naming the rank and that worker's last log line, from the engine's own
  lines (``checks/ranks.dead_worker``); the later gates are blocked;
* a rank that never joins (its worker held, alive and silent, before vLLM's
  ``init_distributed_environment``: ``rankfault/sitecustomize.py``): the start-up FAILs gate 01,
  within a short readiness bound, diagnosed ``missing_rank`` naming rank 1;
* a rank that stalls (its worker asleep at the start of a model step once gate 03 begins:
  ``rankfault/sitecustomize.py``): the engine core waits on the step, says so every
  ``VLLM_RINGBUFFER_WARNING_INTERVAL`` s, then gives up after
  ``VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS`` and dies: gate 03 FAILs with ``ServerDied`` saying a
  model step never finished, diagnosed ``stalled_step`` from those lines; where the gate's
  request runs out of time first, the same gate FAILs with ``ResponseTimeout`` saying the step
  has not finished, diagnosed the same; the later gates are blocked;
* after each run none of the serve's processes is left: every pid its log names (API server,
  engine core, both workers) and the launcher's process group are gone, the port is free.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from test_faults import (
    MAIN,
    Inner,
    alive,
    assert_failed_and_blocked,
    run_inner,
    smollm2_spec,
    write_candidate,
)

from tp2qual.candidate import load_candidate
from tp2qual.hooks.candidates import why_not_runnable
from tp2qual.serving.launchers.base import group_members, port_is_free

pytestmark = [pytest.mark.slow, pytest.mark.vllm_server]

TP2 = MAIN / "candidates" / "smollm2-135m-vllm-tp2.toml"
RANKFAULT = Path(__file__).with_name("rankfault")
NO_PROBE = "not test_probe_all_reduce"
# The never-joining rank's readiness bound: the run waits all of it, so it is the test's cost.
# Enough on a quiet 2-core machine for rank 0 to reach its join line (~45 s) and wait 30 s (the
# diagnosis' stall, HANG_AFTER_S); a machine slower to start raises it here.
NEVER_READY_S = int(os.environ.get("TP2QUAL_TP2_NEVER_READY_S", "120"))
# Every "(Name pid=N)" prefix vLLM gives a process's lines, and uvicorn's own start line.
PID = re.compile(r"^\([\w-]+ pid=(\d+)\)|Started server process \[(\d+)\]", re.M)

# The inner run's fault: SIGKILL the worker of rank $KILL_RANK (its pid from the server log's
# "(Worker_TP<r> pid=N)" lines) once the gate test named by $KILL_AT has its first answer on
# record, so the gate's next request meets the dead rank however fast the machine answers (a
# fixed delay let a quick machine finish the gate first); what was killed goes to $KILL_NOTE.
KILLER = """
import json, os, re, signal, threading, time
from pathlib import Path

def _kill(log):
    answers = log.with_name("deterministic.jsonl")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (answers.exists() and answers.read_text().strip()):
        time.sleep(0.02)
    rank = os.environ["KILL_RANK"]
    pid = int(re.search(rf"\\(Worker_TP{rank} pid=(\\d+)\\)", log.read_text())[1])
    os.kill(pid, signal.SIGKILL)
    Path(os.environ["KILL_NOTE"]).write_text(json.dumps({"pid": pid, "t": time.time()}))

def pytest_runtest_call(item):
    if os.environ["KILL_AT"] in item.nodeid:
        (log,) = Path(os.environ["KILL_RESULTS"]).glob("2*/*/server.log")
        threading.Thread(target=_kill, args=(log,), daemon=True).start()
"""

# The inner run's stall: the trigger file rankfault/sitecustomize.py waits for, made as the gate
# test named by $STALL_AT starts, before its first request.
STALLER = """
import os, time
from pathlib import Path

def pytest_runtest_call(item):
    if os.environ["STALL_AT"] in item.nodeid:
        Path(os.environ["STALL_FILE"]).write_text(str(time.time()))
"""
# How long the engine waits on one step before it gives up, and how often it says it waits: past
# the slowest real step (the first, which compiles: ~25 s on 2 cores), inside gate 03's request
# budget (73 s for 32 tokens at the candidate's 3 tok/s floor); past three waits.
STEP_TIMEOUT_S, WAIT_EVERY_S = 45, 10
BUDGET_S = 35  # the gate's own request_timeout_s, where the budget runs out first


def tp2_spec(name: str, readiness_timeout_s: int) -> dict[str, Any]:
    """The TP2 serve as a local process, with the self-tests' small gates (``smollm2_spec``)."""
    spec = load_candidate(TP2).spec  # smollm2-135m-vllm merged in
    spec["name"], spec["description"] = name, f"self-test process copy of {TP2.stem}"
    spec["launch"]["kind"] = "process"
    spec["launch"].pop("docker")
    spec["launch"]["readiness_timeout_s"] = readiness_timeout_s
    spec.pop("reference")  # gate 07 is not applicable in the copies (smollm2_spec)
    small = smollm2_spec(name)["gates"]
    gates = spec["gates"]
    # Its own known answers, fewer: the llama.cpp candidate's ("What is 2+2?") ramble on vLLM
    # with its sampling (the vLLM candidate's [gates.deterministic] why).
    own = gates["deterministic"]
    gates["deterministic"] = {**own, "repeats": 2, "prompts": own["prompts"][:2]}
    for gate in ("repetition", "throughput", "not_applicable"):
        gates[gate] = small[gate]
    return spec


def runnable(tmp_path: Path, spec: dict[str, Any]) -> None:
    """Write the copy; skip (fail where CI requires the engines) when the engine is missing."""
    path = write_candidate(tmp_path / "candidates", spec)
    if why := why_not_runnable(load_candidate(path)):
        if os.environ.get("TP2QUAL_REQUIRE_ENGINES"):
            pytest.fail(f"the vLLM CPU engine is required here: {why}")
        pytest.skip(f"needs the vLLM CPU engine: {why}")


def serve_processes(inner: Inner, name: str) -> dict[str, Any]:
    """Every process of the serve the run saw, and whether any is left (the test's own count)."""
    evidence = inner.evidence(name)
    launch = json.loads((evidence / "launch.json").read_text())
    log = (evidence / "server.log").read_text(errors="replace")
    pids = {int(a or b) for a, b in PID.findall(log)} | {launch["pid"]}
    port = int(launch["base_url"].rsplit(":", 1)[1])
    return {
        "pids": sorted(pids),
        "left": sorted(p for p in pids if alive(p)),
        "group_left": group_members(launch["pid"]),
        "port_free": port_is_free(port),
    }


def assert_nothing_left(inner: Inner, name: str, at_least: int) -> None:
    seen = serve_processes(inner, name)
    print(f"\n{name}: {len(seen['pids'])} serve processes seen in its log, left: {seen['left']}")
    assert len(seen["pids"]) >= at_least, seen
    assert not seen["left"] and not seen["group_left"] and seen["port_free"], seen


def test_a_killed_tp_worker_is_server_died_naming_its_rank(tmp_path: Path) -> None:
    name = "tp2-kill-rank1"
    runnable(tmp_path, tp2_spec(name, readiness_timeout_s=600))
    (tmp_path / "killer.py").write_text(KILLER)
    note = tmp_path / "killed.json"
    os.environ.update(
        KILL_AT=f"test_known_answers_correct_and_identical[{name}]",
        KILL_RANK="1",
        KILL_RESULTS=str(tmp_path / "results"),
        KILL_NOTE=str(note),
    )
    try:
        inner = run_inner(tmp_path, [f"{name} and {NO_PROBE}"], "-p", "killer")
    finally:
        for key in ("KILL_AT", "KILL_RANK", "KILL_RESULTS", "KILL_NOTE"):
            del os.environ[key]
    assert note.exists(), inner.output()  # the fault happened
    killed = json.loads(note.read_text())
    finding = assert_failed_and_blocked(inner, name, "deterministic")
    assert finding["gates"]["nccl"]["outcome"] == "passed"  # both ranks came up first
    reason = finding["gates"]["deterministic"]["reason"]
    assert "ServerDied" in reason and "server died mid-run" in reason, reason
    assert f"TP rank 1's worker (VllmWorker-1, pid {killed['pid']}) died" in reason, reason
    assert "its last log line: '(Worker_TP1 pid=" in reason, reason
    log = (inner.evidence(name) / "server.log").read_text(errors="replace")
    if re.search(r"VllmWorker-1 died unexpectedly \(exit code: None\)", log):
        assert "the engine logged no exit code" in reason, reason
    failed = [r for r in inner.reports(name) if r["outcome"] == "failed"]
    assert len(failed) == 1 and failed[0]["when"] == "call", failed
    readiness = json.loads((inner.evidence(name) / "readiness.json").read_text())
    print(f"\nTP2 process serve ready (first token) after {readiness['first_token_s']} s")
    print(f"rank 1 SIGKILL -> failure report: {failed[0]['t'] - killed['t']:.1f} s")
    assert failed[0]["t"] - killed["t"] < 120  # noticed by the gate, not by a budget running out
    assert_nothing_left(inner, name, at_least=4)  # API server, engine core, two workers


# Who notices a stalled rank first: the engine, giving up on the step after its own bound (its
# default is 300 s, so on the campaign's budgets usually the suite is first), or the gate, whose
# request runs out of time while the engine still waits.
STALL_CASES = {
    "engine_gives_up": {"env": {"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": str(STEP_TIMEOUT_S)}},
    "budget_runs_out": {"request_timeout_s": BUDGET_S},
}


@pytest.mark.parametrize("case", list(STALL_CASES))
def test_a_stalled_rank_fails_the_gate_diagnosed_stalled_step(tmp_path: Path, case: str) -> None:
    name = f"tp2-rank1-stalls-{case.replace('_', '-')}"
    trigger = tmp_path / "stall-now"
    spec = tp2_spec(name, readiness_timeout_s=600)
    spec["launch"]["env"] |= {
        "PYTHONPATH": str(RANKFAULT),
        "TP2QUAL_FAULT_STALL_RANK": "1",
        "TP2QUAL_FAULT_STALL_FILE": str(trigger),
        "VLLM_RINGBUFFER_WARNING_INTERVAL": str(WAIT_EVERY_S),
        **STALL_CASES[case].get("env", {}),
    }
    if budget := STALL_CASES[case].get("request_timeout_s"):
        spec["gates"]["deterministic"]["request_timeout_s"] = budget
    runnable(tmp_path, spec)
    (tmp_path / "staller.py").write_text(STALLER)
    os.environ.update(
        STALL_AT=f"test_known_answers_correct_and_identical[{name}]", STALL_FILE=str(trigger)
    )
    try:
        inner = run_inner(tmp_path, [f"{name} and {NO_PROBE}"], "-p", "staller")
    finally:
        del os.environ["STALL_AT"], os.environ["STALL_FILE"]
    assert trigger.exists(), inner.output()  # the fault was armed
    finding = assert_failed_and_blocked(inner, name, "deterministic")
    assert finding["gates"]["nccl"]["outcome"] == "passed"  # both ranks came up first
    gate = finding["gates"]["deterministic"]
    reason = gate["reason"]
    assert "a model step never finished: vLLM's engine core waited at least" in reason, reason
    assert "do not say which rank" in reason, reason
    findings = [f for f in (gate["diagnosis"] or {}).get("findings", []) if f["rule"] != "harmless"]
    assert findings and findings[0]["rule"] == "stalled_step", gate["diagnosis"]
    remedy = findings[0]["remedy"]
    if case == "engine_gives_up":
        assert "ServerDied" in reason and "server died mid-run" in reason, reason
        assert "gave up ('RPC call to execute_model timed out.')" in reason, reason
        assert f"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS={STEP_TIMEOUT_S} here" in remedy, remedy
        bound = STEP_TIMEOUT_S
    else:
        assert "ResponseTimeout" in reason, reason
        assert f"no response within {BUDGET_S} s (the gate's request_timeout_s)" in reason, reason
        assert "server alive: a model step never finished" in reason, reason
        assert "and has heard nothing since" in reason, reason
        assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS, default 300" in remedy, remedy
        bound = BUDGET_S
    failed = [r for r in inner.reports(name) if r["outcome"] == "failed"]
    assert len(failed) == 1 and failed[0]["when"] == "call", failed
    armed = float(trigger.read_text())
    print(f"\n{case}: stall armed -> failure report: {failed[0]['t'] - armed:.1f} s")
    assert failed[0]["t"] - armed < bound + 120  # noticed at its bound
    assert_nothing_left(inner, name, at_least=4)  # the sleeping worker too


def test_a_rank_that_never_joins_fails_startup_diagnosed(tmp_path: Path) -> None:
    name = "tp2-rank1-never-joins"
    spec = tp2_spec(name, readiness_timeout_s=NEVER_READY_S)
    spec["launch"]["env"] |= {"PYTHONPATH": str(RANKFAULT), "TP2QUAL_FAULT_HOLD_RANK": "1"}
    runnable(tmp_path, spec)
    inner = run_inner(tmp_path, [f"{name} and {NO_PROBE}"])
    finding = assert_failed_and_blocked(inner, name, "nccl")
    gate = finding["gates"]["nccl"]
    said = f"not ready after {NEVER_READY_S}s"
    assert "StartupTimeout" in gate["reason"] and said in gate["reason"], gate
    log = (inner.evidence(name) / "server.log").read_text(errors="replace")
    assert "world_size=2 rank=0 " in log, f"rank 0 never began to join within {said}: raise it"
    assert "world_size=2 rank=1 " not in log  # the fault: rank 1 was held before its init
    failed = [r for r in inner.reports(name) if r["outcome"] == "failed"]
    assert len(failed) == 1 and failed[0]["when"] == "setup", failed  # one start-up error
    findings = [f for f in (gate["diagnosis"] or {}).get("findings", []) if f["rule"] != "harmless"]
    assert findings and findings[0]["rule"] == "missing_rank", gate["diagnosis"]
    assert "rank(s) [1] of 2 never joined" in findings[0]["cause"], findings[0]
    assert "diagnosed missing_rank:" in inner.proc.stdout, inner.output()
    assert_nothing_left(inner, name, at_least=4)  # the held worker too
