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
TP name.

SGLang 0.5.23 on the CPU says the same in its own words (``tp2qual/engines/sglang.py``; seen in
``data/sglang-0.5.23/qualification-tp2-server.log``), each line prefixed ``[<time> TP<r>]`` by
the rank's scheduler process: ``init_threads_binding: numa_index=…, world_size=W,
local_omp_cpuid=…`` as the rank begins (``srt/utils/numa_utils.py``), and ``Init parallel
ends.`` once its groups exist (``srt/distributed/bootstrap.py``), which over gloo no rank passes
before every rank of the world joined. Its lines name no backend (gloo is its default for
``--device cpu``, ``_resolve_backend``; the probe proves gloo itself) and its ``Init parallel
ends`` names no world size: such a group is taken to be formed with the world its rank began in.

A worker that died mid-run is read from the same engine's lines (``dead_worker``): the multiproc
executor's monitor logs ``Worker proc VllmWorker-<rank> died unexpectedly (exit code: C),
shutting down executor.`` (``v1/executor/multiproc_executor.py:315``; the process is named by its
rank at :747). The exit code is what ``multiprocessing`` had reaped by then: ``None`` when the
monitor woke before the kill was reaped (seen for a SIGKILL, ``data/vllm-cpu-tp2/``). The
worker's lines carry its pid in every prefix it logs under (``VllmWorker-1``, ``Worker``,
``Worker_TP1``), so its TP rank and last line follow from that pid.

Pure: text in, frozen dataclasses and a ``Verdict`` out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.nccl import clean_lines
from tp2qual.checks.verdict import Verdict
from tp2qual.engines import any_engine_line

# The engine's own lines (vLLM's today: tp2qual/engines/vllm.py, with their source). The gate
# is not told the engine, so it reads every engine's lines of each name.
_STARTED = any_engine_line("rank_starts")
_FORMED = any_engine_line("group_formed")
_NAMED = any_engine_line("worker_named_any")
_DIED = any_engine_line("worker_died")
_PREFIX = any_engine_line("process_prefix")
_PROC_RANK = re.compile(r"-(?P<rank>\d+)$")  # VllmWorker-<rank>


UNNAMED = ""  # the backend, where the engine's line does not name it (SGLang)


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
            "backends": sorted(
                {b or "(not named in the engine's lines)" for _, _, b in self.started}
            ),
        }


def analyze(text: str) -> RankLog:
    lines = clean_lines(text)
    started = []
    for m in filter(None, (_STARTED.search(line) for line in lines)):
        one = (int(m["rank"]), int(m["world"]), m.groupdict().get("backend") or UNNAMED)
        if one not in started:
            started.append(one)
    formed: set[int] = set()
    for m in filter(None, (_FORMED.search(ln) for ln in lines)):
        world = m.groupdict().get("world")
        rank = int(m["rank"])
        formed |= {int(world)} if world else {w for r, w, _ in started if r == rank}
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
        elif not {(tp_size, backend), (tp_size, UNNAMED)} & set(began):
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


@dataclass(frozen=True)
class DeadWorker:
    """The worker the engine itself said died, as its own lines tell it."""

    process: str  # the executor's name for it (``VllmWorker-1``)
    rank: int | None  # its TP rank (its ``Worker_TP<r>`` name), else the rank in its process name
    pid: int | None  # the pid its lines carry
    exit_code: int | None  # None: the engine logged none
    death: str  # the executor's line saying so
    last_line: str | None  # the worker's own last line before it died

    def describe(self) -> str:
        """One sentence: which rank died, its exit code as logged, and its last line."""
        who = f"TP rank {self.rank}" if self.rank is not None else "a worker"
        pid = f", pid {self.pid}" if self.pid is not None else ""
        code = (
            "the engine logged no exit code"
            if self.exit_code is None
            else f"the engine logged exit code {self.exit_code}"
        )
        last = f"'{self.last_line}'" if self.last_line else "none (it logged nothing)"
        return f"{who}'s worker ({self.process}{pid}) died: {code}; its last log line: {last}"


def dead_worker(text: str) -> DeadWorker | None:
    """The first worker the engine's executor logged as died unexpectedly, or None."""
    lines = clean_lines(text)
    found = next(((n, m) for n, ln in enumerate(lines) if (m := _DIED.search(ln))), None)
    if found is None:
        return None
    at, died = found
    process = died["proc"]
    prefixes = [(n, m) for n, ln in enumerate(lines[:at]) if (m := _PREFIX.match(ln))]
    pid = next((int(m["pid"]) for _, m in prefixes if m["name"] == process), None)
    own = [n for n, m in prefixes if pid is not None and int(m["pid"]) == pid]
    named = {int(t["tp"]) for n in own for t in _NAMED.finditer(lines[n])}
    by_name = _PROC_RANK.search(process)
    rank = min(named) if named else (int(by_name["rank"]) if by_name else None)
    code = (died["code"] or "").strip()
    return DeadWorker(
        process=process,
        rank=rank,
        pid=pid,
        exit_code=int(code) if re.fullmatch(r"-?\d+", code) else None,
        death=lines[at].strip(),
        last_line=lines[own[-1]].strip() if own else None,
    )
