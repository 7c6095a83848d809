"""Which tensor-parallel ranks of a CPU serve joined its process group, from the engine's own lines.

On the CPU, vLLM joins its TP ranks with torch.distributed over gloo and NCCL prints nothing, so
gate 01 reads the lines vLLM itself prints while the ranks come up (vLLM 0.32.0,
``vllm/distributed/parallel_state.py``):

* ``rank R in world size W is assigned as DP rank …, PP rank …, PCP rank …, TP rank T, …`` (INFO,
  ``initialize_model_parallel``): logged by every rank once its world group has formed, so it is
  the CPU's counterpart of NCCL's ``Init COMPLETE``;
* ``world_size=W rank=R local_rank=L distributed_init_method=… backend=B`` (DEBUG,
  ``init_distributed_environment``): the backend, when the engine logs at DEBUG.

Pure: text in, a frozen dataclass and a ``Verdict`` out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

from tp2qual.checks.nccl import clean_lines
from tp2qual.checks.verdict import Verdict

_ASSIGNED = re.compile(
    r"\brank (?P<rank>\d+) in world size (?P<world>\d+) is assigned as .*?\bTP rank (?P<tp>\d+)"
)
_INIT = re.compile(
    r"\bworld_size=(?P<world>-?\d+) rank=(?P<rank>-?\d+) local_rank=-?\d+ "
    r"distributed_init_method=\S+ backend=(?P<backend>\w+)"
)


class Joined(NamedTuple):
    """One rank's assignment line: it joined a world of ``world`` ranks as TP rank ``tp_rank``."""

    rank: int
    world: int
    tp_rank: int


@dataclass(frozen=True)
class RankLog:
    joined: tuple[Joined, ...]
    backends: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "joined": [j._asdict() for j in self.joined],
            "ranks_joined": sorted({j.tp_rank for j in self.joined}),
            "world_sizes": sorted({j.world for j in self.joined}),
            "backends": sorted(set(self.backends)),
        }


def analyze(text: str) -> RankLog:
    lines = clean_lines(text)
    joined: list[Joined] = []
    for m in filter(None, (_ASSIGNED.search(line) for line in lines)):
        one = Joined(int(m["rank"]), int(m["world"]), int(m["tp"]))
        if one not in joined:
            joined.append(one)
    backends = tuple(m["backend"] for m in filter(None, (_INIT.search(ln) for ln in lines)))
    return RankLog(tuple(joined), backends)


def check(log: RankLog, *, tp_size: int, backend: str) -> Verdict:
    """Pass iff every TP rank 0..tp-1 joined a world of ``tp_size`` ranks, and any backend the
    engine named is ``backend``."""
    problems = []
    for rank in range(tp_size):
        worlds = sorted({j.world for j in log.joined if j.tp_rank == rank})
        if tp_size in worlds:
            continue
        problems.append(
            f"TP rank {rank} joined only a world of size {worlds}, expected {tp_size}"
            if worlds
            else f"TP rank {rank} never logged its assignment ('rank … in world size {tp_size} is"
            " assigned as … TP rank …'): it did not join the process group; read its worker's"
            " lines in the server log"
        )
    wrong = sorted(set(log.backends) - {backend})
    if wrong:
        problems.append(f"the ranks joined over {wrong}, expected {backend}")
    facts = log.to_dict() | {"tp_size": tp_size, "backend": backend}
    return Verdict.failed("; ".join(problems), **facts) if problems else Verdict.passed(**facts)
