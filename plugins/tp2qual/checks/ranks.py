"""Which tensor-parallel ranks of a CPU serve joined its process group, from the engine's own lines.

On the CPU, vLLM joins its TP ranks with torch.distributed over gloo and NCCL prints nothing, so
gate 01 reads the lines vLLM itself prints while the ranks come up (vLLM 0.32.0; seen in
``data/vllm-cpu-tp2/server.log``):

* ``world_size=W rank=R local_rank=L distributed_init_method=… backend=B``
  (``parallel_state.py``, ``init_distributed_environment``): each rank, as it starts to join;
* ``rank 0 in world size W is assigned as DP rank …, TP rank 0, …`` (``initialize_model_parallel``,
  logged once, by rank 0): the world group formed, which gloo allows only once every rank joined;
* ``(Worker_TP<r> pid=…)``: the multiproc executor names a worker by its TP rank only once its
  TP group exists (``multiproc_executor.py``); before that its lines say ``(Worker pid=…)``.

So a rank joined when it started with the right world size and backend and then logged under its
TP name. Pure: text in, a frozen dataclass and a ``Verdict`` out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.nccl import clean_lines
from tp2qual.checks.verdict import Verdict
from tp2qual.engines import vllm

# vLLM's own lines, from its module (tp2qual/engines/vllm.py, with their source).
_STARTED = re.compile(vllm.RANK_STARTS)
_FORMED = re.compile(vllm.GROUP_FORMED)
_NAMED = re.compile(vllm.WORKER_NAMED_ANY)


@dataclass(frozen=True)
class RankLog:
    started: tuple[tuple[int, int, str], ...]  # (rank, world size, backend) as each began to join
    formed_worlds: tuple[int, ...]  # world sizes a formed group reported
    named: tuple[int, ...]  # TP ranks whose worker logged under its TP name

    def to_dict(self) -> dict[str, Any]:
        return {
            "started": [{"rank": r, "world": w, "backend": b} for r, w, b in self.started],
            "ranks_started": sorted({r for r, _, _ in self.started}),
            "ranks_joined": sorted(set(self.named)),
            "world_sizes": sorted({w for _, w, _ in self.started} | set(self.formed_worlds)),
            "backends": sorted({b for _, _, b in self.started}),
        }


def analyze(text: str) -> RankLog:
    lines = clean_lines(text)
    started = []
    for m in filter(None, (_STARTED.search(line) for line in lines)):
        one = (int(m["rank"]), int(m["world"]), m["backend"])
        if one not in started:
            started.append(one)
    formed = {int(m["world"]) for m in filter(None, (_FORMED.search(ln) for ln in lines))}
    named = {int(m["tp"]) for line in lines for m in _NAMED.finditer(line)}
    return RankLog(tuple(started), tuple(sorted(formed)), tuple(sorted(named)))


def check(log: RankLog, *, tp_size: int, backend: str) -> Verdict:
    """Pass iff every TP rank 0..tp-1 began to join a world of ``tp_size`` ranks over
    ``backend`` and then logged under its TP name, and the group formed with ``tp_size``."""
    problems = []
    for rank in range(tp_size):
        began = [(w, b) for r, w, b in log.started if r == rank]
        if not began:
            problems.append(
                f"rank {rank} never began to join ('world_size={tp_size} rank={rank} …"
                f" backend={backend}' missing): it did not start; read the server log"
            )
        elif (tp_size, backend) not in began:
            want = f"({tp_size}, {backend})"
            problems.append(f"rank {rank} began to join as {began}, expected {want}")
        elif rank not in log.named:
            problems.append(
                f"rank {rank} began to join but never logged as Worker_TP{rank}: its TP group"
                " did not form (a rank missing or stalled); read the server log"
            )
    if not problems and tp_size not in log.formed_worlds:
        line = f"rank 0 in world size {tp_size} is assigned as …"
        problems.append(f"no '{line}' line: no group formed")
    facts = log.to_dict() | {"tp_size": tp_size, "backend": backend}
    return Verdict.failed("; ".join(problems), **facts) if problems else Verdict.passed(**facts)
