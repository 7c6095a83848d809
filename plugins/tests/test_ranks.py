"""Gate 01 on a CPU serve: which TP ranks joined, read from vLLM's own start-up lines.

The lines are in vLLM 0.32.0's formats (``vllm/distributed/parallel_state.py``); the serve's real
log is in ``data/vllm-cpu-tp2/``.
"""

from __future__ import annotations

from pathlib import Path

from tp2qual.checks import ranks

DATA = Path(__file__).parent / "data" / "vllm-cpu-tp2"

RANK0 = (
    "(Worker pid=412) INFO 12-01 22:40:01 [parallel_state.py:1906] world_size=2 rank=0 local_rank=0"
    " distributed_init_method=tcp://127.0.0.1:41231 backend=gloo"
)
ASSIGNED = (
    "(Worker_TP{r} pid=41{r}) INFO 12-01 22:40:02 [parallel_state.py:2350] rank {r} in world size"
    " {w} is assigned as DP rank 0, PP rank 0, PCP rank 0, TP rank {r}, EP rank N/A, EPLB rank N/A"
)


def test_every_rank_joined_passes() -> None:
    text = "\n".join([RANK0, ASSIGNED.format(r=0, w=2), ASSIGNED.format(r=1, w=2)])
    verdict = ranks.check(ranks.analyze(text), tp_size=2, backend="gloo")
    assert verdict.ok, verdict.reason
    assert verdict.measures["ranks_joined"] == [0, 1]
    assert verdict.measures["world_sizes"] == [2]
    assert verdict.measures["backends"] == ["gloo"]


def test_a_rank_that_never_joined_is_named() -> None:
    verdict = ranks.check(ranks.analyze(ASSIGNED.format(r=0, w=2)), tp_size=2, backend="gloo")
    assert not verdict.ok
    assert "TP rank 1 never logged its assignment" in verdict.reason


def test_a_world_of_the_wrong_size_fails() -> None:
    verdict = ranks.check(ranks.analyze(ASSIGNED.format(r=0, w=1)), tp_size=2, backend="gloo")
    assert not verdict.ok
    assert "TP rank 0 joined only a world of size [1], expected 2" in verdict.reason


def test_the_wrong_backend_fails() -> None:
    text = "\n".join(
        [RANK0.replace("gloo", "nccl"), ASSIGNED.format(r=0, w=2), ASSIGNED.format(r=1, w=2)]
    )
    verdict = ranks.check(ranks.analyze(text), tp_size=2, backend="gloo")
    assert not verdict.ok
    assert "joined over ['nccl'], expected gloo" in verdict.reason


def test_no_lines_at_all_fails_for_every_rank() -> None:
    verdict = ranks.check(ranks.analyze(""), tp_size=2, backend="gloo")
    assert not verdict.ok
    assert "TP rank 0" in verdict.reason and "TP rank 1" in verdict.reason
