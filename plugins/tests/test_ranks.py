"""Gate 01 on a CPU serve: which TP ranks joined, read from vLLM's own start-up lines.

``data/vllm-cpu-tp2/server.log`` is the real start of ``smollm2-135m-vllm-tp2`` (vLLM 0.32.0 CPU,
two ranks over gloo, in its container); the faults are that log with a rank's lines taken out.
"""

from __future__ import annotations

from pathlib import Path

from tp2qual.checks import ranks

REAL = (Path(__file__).parent / "data" / "vllm-cpu-tp2" / "server.log").read_text()


def without(*needles: str) -> str:
    return "\n".join(ln for ln in REAL.splitlines() if not any(n in ln for n in needles))


def test_the_real_tp2_start_passes() -> None:
    verdict = ranks.check(ranks.analyze(REAL), tp_size=2, backend="gloo")
    assert verdict.ok, verdict.reason
    assert verdict.measures["ranks_started"] == [0, 1]
    assert verdict.measures["ranks_joined"] == [0, 1]
    assert verdict.measures["world_sizes"] == [2]
    assert verdict.measures["backends"] == ["gloo"]


def test_a_rank_whose_group_never_formed_is_named() -> None:
    verdict = ranks.check(ranks.analyze(without("(Worker_TP1 ")), tp_size=2, backend="gloo")
    assert not verdict.ok
    assert "rank 1 began to join but never logged as Worker_TP1" in verdict.reason


def test_a_rank_that_never_started_is_named() -> None:
    text = without("(Worker_TP1 ", "world_size=2 rank=1 ")
    verdict = ranks.check(ranks.analyze(text), tp_size=2, backend="gloo")
    assert not verdict.ok
    assert "rank 1 never began to join" in verdict.reason


def test_the_wrong_world_size_or_backend_fails() -> None:
    verdict = ranks.check(ranks.analyze(REAL.replace("backend=gloo", "backend=nccl")), tp_size=2,
                          backend="gloo")  # fmt: skip
    assert not verdict.ok and "expected (2, gloo)" in verdict.reason
    verdict = ranks.check(ranks.analyze(REAL), tp_size=4, backend="gloo")
    assert not verdict.ok and "rank 2 never began to join" in verdict.reason


def test_no_group_formed_fails() -> None:
    verdict = ranks.check(ranks.analyze(without("is assigned as")), tp_size=2, backend="gloo")
    assert not verdict.ok and "no group formed" in verdict.reason


# --- a worker that died mid-run: data/vllm-cpu-tp2/worker-killed.log, the same serve with rank
# 1's worker SIGKILLed while a request was in flight -------------------------------------------

KILLED = (Path(__file__).parent / "data" / "vllm-cpu-tp2" / "worker-killed.log").read_text()
RANK1_LAST = (
    "(Worker_TP1 pid=841) INFO 12-02 05:09:12 [cpu_worker.py:260] Explicitly set (1.0/16.71) GiB"
    " for KV cache on node 0."
)


def test_the_killed_worker_is_named_with_its_rank_and_last_line() -> None:
    dead = ranks.dead_worker(KILLED)
    assert dead is not None
    assert (dead.process, dead.rank, dead.pid, dead.exit_code) == ("VllmWorker-1", 1, 841, None)
    assert dead.last_line == RANK1_LAST  # its own, not rank 0's later shutdown lines
    assert "died unexpectedly (exit code: None)" in dead.death
    assert dead.describe() == (
        "TP rank 1's worker (VllmWorker-1, pid 841) died: the engine logged no exit code;"
        f" its last log line: '{RANK1_LAST}'"
    )


def test_a_logged_exit_code_is_quoted() -> None:
    text = KILLED.replace("(exit code: None)", "(exit code: -9)")
    dead = ranks.dead_worker(text)
    assert dead is not None and dead.exit_code == -9
    assert "the engine logged exit code -9" in dead.describe()


def test_a_worker_that_never_logged_is_named_by_its_process() -> None:
    text = "\n".join(ln for ln in KILLED.splitlines() if "pid=841)" not in ln)
    dead = ranks.dead_worker(text)
    assert dead is not None and (dead.rank, dead.pid, dead.last_line) == (1, None, None)
    assert "its last log line: none (it logged nothing)" in dead.describe()


def test_a_healthy_start_names_no_dead_worker() -> None:
    assert ranks.dead_worker(REAL) is None
