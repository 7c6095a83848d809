"""Shared pieces of the measurement-fidelity benchmarks: results folder, CPU pinning, starting
the embedded local candidate through the suite's own launcher and readiness code."""

from __future__ import annotations

import copy
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "plugins"))  # runs from a checkout without `pip install -e .` too

from tp2qual.artifacts.layout import Evidence  # noqa: E402
from tp2qual.candidate import Candidate, load_candidate  # noqa: E402
from tp2qual.redact import Redactor  # noqa: E402
from tp2qual.serving.launchers.process import ProcessLauncher  # noqa: E402
from tp2qual.serving.managed import ManagedServer  # noqa: E402
from tp2qual.serving.readiness import Readiness  # noqa: E402
from tp2qual.serving.server import Server  # noqa: E402

LOCAL_CANDIDATE = ROOT / "candidates" / "smollm2-135m-local.toml"


def results_dir(name: str) -> Path:
    """``results/bench-<UTC time>-<name>/`` (results/ is git-ignored)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = ROOT / "results" / f"bench-{stamp}-{name}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def load_text() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} (cores: {os.cpu_count()})"


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def pin_process(pid: int, cpus: set[int]) -> None:
    """Pin every thread of ``pid`` (threads created later inherit from their creator)."""
    tasks = Path(f"/proc/{pid}/task")
    tids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [pid]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):
            continue


def split_cpus(server_cpu: int | None, client_cpu: int | None) -> tuple[set[int], set[int]]:
    """Server and client CPU sets; both all CPUs when the machine has one or pinning is off."""
    every = os.sched_getaffinity(0)
    if server_cpu is None or client_cpu is None or len(every) < 2:
        return set(every), set(every)
    return {server_cpu}, {client_cpu}


def with_threads(candidate: Candidate, n_threads: int | None) -> Candidate:
    """The candidate with ``--n_threads`` replaced (llama.cpp spins its threads: two threads on
    one pinned core contend, so a server pinned to one core gets one thread, for decode and
    prompt processing alike)."""
    if n_threads is None:
        return candidate
    spec = copy.deepcopy(candidate.spec)
    command = spec["launch"]["command"]
    # n_threads_batch (prompt processing) defaults to the CPU count, not to n_threads.
    for flag in ("--n_threads", "--n_threads_batch"):
        if flag in command:
            command[command.index(flag) + 1] = str(n_threads)
        else:
            command += [flag, str(n_threads)]
    return Candidate(path=candidate.path, spec=spec)


@dataclass
class Running:
    candidate: Candidate
    launcher: ProcessLauncher
    server: Server
    readiness: Readiness


@contextmanager
def local_server(
    folder: Path,
    *,
    n_threads: int | None = None,
    server_cpus: set[int] | None = None,
    client_cpus: set[int] | None = None,
) -> Iterator[Running]:
    """Start the embedded local candidate through the suite's own ``ManagedServer`` (the life
    cycle the fixture uses); pin it to ``server_cpus`` and this process to ``client_cpus``."""
    candidate = with_threads(load_candidate(LOCAL_CANDIDATE), n_threads)
    redactor = Redactor(candidate.env())
    evidence = Evidence(folder, redactor)
    launcher = ProcessLauncher(candidate, evidence.path("server.log"), redactor)
    managed = ManagedServer(candidate, evidence, launcher)
    with managed as server:
        if server_cpus:
            pin_process(launcher.pid, server_cpus)
        if client_cpus:
            pin_process(os.getpid(), client_cpus)
        assert managed.readiness is not None
        yield Running(candidate, launcher, server, managed.readiness)
