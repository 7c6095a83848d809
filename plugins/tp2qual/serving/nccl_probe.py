"""A stand-alone NCCL probe: N ranks, one ``torch.distributed`` all-reduce, nothing else.

``python -m tp2qual.nccl_probe --nprocs 2 --timeout 120`` answers "does NCCL initialise on
this host with these settings?" before any engine loads a model. Each rank is its own process
(started here, no torchrun) on CUDA device ``rank % device_count``, so a one-GPU host runs one
rank, and two ranks on one GPU give NCCL's real "Duplicate GPU detected" failure. The ranks
inherit the environment (NCCL_DEBUG=INFO, NCCL_P2P_DISABLE, ...); their output is echoed with a
``[rankR]`` prefix, and optionally kept raw per rank (``--log-dir``) for the log analysis.

The last stdout line is one JSON object (per-rank results, wall times, timed_out). Exit status:
0 all ranks summed right, 1 a rank failed, 124 the timeout hit and every rank was killed.
torch is imported only inside a rank, so this module imports (and its launcher runs) without it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

RESULT_TAG = "TP2QUAL_PROBE_RESULT "
EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 124
KILL_GRACE_S = 5.0
FAIL_GRACE_S = 15.0
POLL_S = 0.05
ENV_PREFIXES = ("NCCL_", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES", "TORCH_")

WorkerArgv = Callable[[int, int, int], list[str]]


@dataclass
class RankOutcome:
    """One rank as the launcher saw it; ``result`` is what the rank itself reported, if any."""

    rank: int
    returncode: int | None = None
    result: dict[str, Any] | None = None
    lines: int = 0


@dataclass
class ProbeReport:
    """The final JSON line; ``ok`` only when every rank reported a right sum and exited 0."""

    nprocs: int
    timeout_s: float
    ok: bool = False
    timed_out: bool = False
    wall_s: float = 0.0
    ranks: list[dict[str, Any]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        if self.timed_out:
            return EXIT_TIMEOUT
        return EXIT_OK if self.ok else EXIT_FAILED


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tp2qual.nccl_probe", description=__doc__)
    parser.add_argument("--nprocs", type=_positive_int, default=2, help="ranks (default 2)")
    parser.add_argument(
        "--timeout", type=_positive_float, default=120.0, help="seconds before all are killed"
    )
    parser.add_argument("--log-dir", type=Path, help="also write each rank's raw output here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be greater than 0")
    return value


def free_port() -> int:
    """A loopback port for the rendezvous; only loopback is ever a target here."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def default_worker_argv(rank: int, world: int, port: int) -> list[str]:
    # By file path, not ``-m``: inside a candidate's image this file is mounted alone.
    return [
        sys.executable, str(Path(__file__).resolve()), "--worker",
        "--rank", str(rank), "--nprocs", str(world), "--port", str(port),
    ]  # fmt: skip


def relevant_env(env: dict[str, str]) -> dict[str, str]:
    """The settings that decide NCCL's behaviour, recorded beside the result as evidence."""
    return {k: v for k, v in sorted(env.items()) if k.startswith(ENV_PREFIXES)}


def launch(
    nprocs: int,
    timeout_s: float,
    *,
    log_dir: Path | None = None,
    out: TextIO | None = None,
    worker_argv: WorkerArgv | None = None,
    fail_grace_s: float = FAIL_GRACE_S,
) -> ProbeReport:
    """Start the ranks, echo their output, and kill every process group at the deadline."""
    out = out or sys.stdout
    worker_argv = worker_argv or default_worker_argv
    lock = threading.Lock()
    port = free_port()
    started = time.monotonic()
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    procs, readers, outcomes = [], [], []
    for rank in range(nprocs):
        outcome = RankOutcome(rank)
        proc = subprocess.Popen(
            worker_argv(rank, nprocs, port),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            start_new_session=True,  # one process group per rank: killpg reaps its children too
        )
        log = (log_dir / f"rank{rank}.log").open("w") if log_dir else None
        reader = threading.Thread(target=_pump, args=(proc, outcome, out, log, lock), daemon=True)
        reader.start()
        procs.append(proc)
        readers.append(reader)
        outcomes.append(outcome)
    timed_out = _wait_all(procs, started + timeout_s, fail_grace_s)
    if timed_out:
        _kill_all(procs)
    for proc, reader, outcome in zip(procs, readers, outcomes, strict=True):
        reader.join(KILL_GRACE_S)
        outcome.returncode = proc.returncode
    return _report(nprocs, timeout_s, outcomes, timed_out, time.monotonic() - started)


def _pump(
    proc: subprocess.Popen[str], outcome: RankOutcome, out: TextIO, log: TextIO | None, lock: Any
) -> None:
    """Copy one rank's lines to the console (prefixed) and its raw log; pick up its result."""
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            outcome.lines += 1
            if line.startswith(RESULT_TAG):
                outcome.result = _parse_result(line[len(RESULT_TAG) :])
            if log:
                log.write(line)
            with lock:
                out.write(f"[rank{outcome.rank}] {line}")
                out.flush()
    finally:
        proc.stdout.close()
        if log:
            log.close()


def _parse_result(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _wait_all(procs: list[subprocess.Popen[str]], deadline: float, fail_grace_s: float) -> bool:
    """Wait until every rank exits; True when the deadline came first.

    Once a rank has failed, its peers get FAIL_GRACE_S to fail too, then are killed: they would
    only hang in a collective waiting for the dead rank.
    """
    failed_at: float | None = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if now >= deadline:
            return True
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = now
        if failed_at is not None and now - failed_at >= fail_grace_s:
            _kill_all(procs)
            return False
        time.sleep(POLL_S)
    return False


def _kill_all(procs: list[subprocess.Popen[str]]) -> None:
    """SIGTERM every rank's group, then SIGKILL what is left after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in procs:
            if proc.poll() is None:
                _killpg(proc.pid, sig)
        deadline = time.monotonic() + KILL_GRACE_S
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        if all(proc.poll() is not None for proc in procs):
            return


def _killpg(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _report(
    nprocs: int, timeout_s: float, outcomes: list[RankOutcome], timed_out: bool, wall_s: float
) -> ProbeReport:
    ranks = [_rank_entry(o) for o in outcomes]
    ok = not timed_out and all(r["ok"] for r in ranks)
    return ProbeReport(
        nprocs=nprocs,
        timeout_s=timeout_s,
        ok=ok,
        timed_out=timed_out,
        wall_s=round(wall_s, 3),
        ranks=ranks,
        env=relevant_env(dict(os.environ)),
    )


def _rank_entry(o: RankOutcome) -> dict[str, Any]:
    result = o.result or {}
    ok = o.returncode == 0 and bool(result.get("ok"))
    entry: dict[str, Any] = {
        "rank": o.rank,
        "returncode": o.returncode,
        "ok": ok,
        "output_lines": o.lines,
    }
    entry.update({k: v for k, v in result.items() if k not in entry})
    if not o.result:
        entry["error"] = "rank reported no result"
    return entry


def worker(rank: int, world: int, port: int) -> int:
    """One rank: init NCCL over a loopback rendezvous, all-reduce ones, expect ``world``."""
    started = time.monotonic()
    result: dict[str, Any] = {"rank": rank, "ok": False}
    try:
        result.update(_all_reduce(rank, world, port))
        result["ok"] = result["sum"] == float(world)
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    result["wall_s"] = round(time.monotonic() - started, 3)
    print(RESULT_TAG + json.dumps(result), flush=True)
    return EXIT_OK if result["ok"] else EXIT_FAILED


def _all_reduce(rank: int, world: int, port: int) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available to torch")
    device = rank % torch.cuda.device_count()
    torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    t = torch.ones(1, device=f"cuda:{device}")
    dist.all_reduce(t)  # NCCL builds its communicator here, so init failures surface here
    torch.cuda.synchronize()
    total = float(t.item())
    dist.destroy_process_group()  # not after a failure: destroying a broken comm can hang
    nccl = ".".join(str(p) for p in torch.cuda.nccl.version())
    return {"device": device, "sum": total, "torch": torch.__version__, "nccl": nccl}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args.rank, args.nprocs, args.port)
    report = launch(args.nprocs, args.timeout, log_dir=args.log_dir)
    if report.timed_out:
        print(f"nccl_probe: timed out after {args.timeout:g} s; killed all ranks", flush=True)
    print(json.dumps(asdict(report), sort_keys=True), flush=True)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
