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
