"""A stand-alone collective probe: N ranks, ``torch.distributed`` all-reduces, nothing else.

``python -m tp2qual.nccl_probe --nprocs 2 --timeout 120`` answers "do the ranks' collectives
work on this host with these settings?" before any engine loads a model, with the engine's own
backend: ``nccl`` on GPUs, ``gloo`` on the CPU (``--backend``). Each rank is its own process
(started here, no torchrun); under NCCL on CUDA device ``rank % device_count``, so a one-GPU host
runs one rank, and two ranks on one GPU give NCCL's real "Duplicate GPU detected" failure.

Each rank all-reduces buffers of several sizes (``--sizes``, default 4 KiB, 1 MiB, 32 MiB: small
ones take NCCL's LL protocol, large ones Simple) in each dtype (``--dtypes``, bf16 and fp32).
Rank r fills element i with ((r+1)(i mod p) + r) mod p, p the largest prime for which every
element of the sum stays an exact integer in the dtype (127 in bf16 at N=2: ``fill_modulus``),
and every element of the sum is checked against its own expected value. The fill depends on
the rank and the position, and p is odd, so a chunk misplaced, duplicated or shifted by any
power-of-two offset sums wrong (a constant fill sums the same); a wrong case names how many
elements are wrong, the first and last, and what the first held. Timing follows
nccl-tests: ``--warmup`` untimed, then ``--iters`` timed; seconds per all-reduce; algbw =
bytes / seconds; busbw = algbw * 2(N-1)/N (GB/s = 1e9 bytes/s); the report takes the mean over
ranks of each rank's time, as nccl-tests' default ``-a 1``.

The ranks inherit the environment (NCCL_DEBUG=INFO, NCCL_P2P_DISABLE, ...); their output is
echoed with a ``[rankR]`` prefix, and optionally kept raw per rank (``--log-dir``). Each rank
prints time-stamped progress lines (``tp2qual-probe rank R/N: ...``) so a stall can be read from
the log. The last stdout line is ``TP2QUAL_PROBE_REPORT {json}`` (per-rank results, per-case
figures, wall time, timed_out), read by ``tp2qual.checks.probe_result``. Exit status: 0 every
rank summed right, 1 a rank failed, 124 the timeout hit and every rank was killed. torch is
imported only inside a rank, so this module imports (and its launcher runs) without it.

One file on purpose, stdlib only: it is mounted alone into the engine's image
(``serving/probe.py``), where nothing else of the suite is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
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

RESULT_TAG = "TP2QUAL_PROBE_RESULT "  # one rank's own result line
REPORT_TAG = "TP2QUAL_PROBE_REPORT "  # the launcher's final line: every rank, every case
PROGRESS = "tp2qual-probe"  # the prefix of a rank's time-stamped progress lines
BACKENDS = ("nccl", "gloo")
DTYPES = ("bf16", "fp32", "fp16")
DEFAULT_SIZES = "4K,1M,32M"
DEFAULT_DTYPES = "bf16,fp32"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
# The rank's own torch.distributed timeout, as a share of the probe's: a missing peer or a
# stalled collective then ends in torch's own error (which names it) before the launcher kills.
TORCH_TIMEOUT_SHARE = 0.75
EXIT_OK, EXIT_FAILED, EXIT_TIMEOUT = 0, 1, 124
KILL_GRACE_S = 5.0
FAIL_GRACE_S = 15.0
POLL_S = 0.05
ENV_PREFIXES = ("NCCL_", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES", "TORCH_")
# The largest integer below which every integer is exact, per dtype (8, 11, 24 mantissa bits).
EXACT_UP_TO = {"bf16": 1 << 8, "fp16": 1 << 11, "fp32": 1 << 24}
FILL_PRIME_CAP = 65521  # the largest prime below 2^16: enough positions before the fill repeats
# Fault injection for the self-tests (``--corrupt RANK:KIND``), on that rank's summed buffer
# before it is checked, by whole chunks of an eighth of the buffer: a collective that put a
# chunk in the wrong place, delivered one twice, or shifted them all.
CORRUPTIONS = ("swap", "duplicate", "shift")
CHUNKS = 8

WorkerArgv = Callable[[int, int, int], list[str]]


@dataclass(frozen=True)
class Plan:
    """What every rank runs: the backend, the buffer sizes in bytes, the dtypes, the timing."""

    backend: str = "nccl"
    sizes: tuple[int, ...] = (4 << 10, 1 << 20, 32 << 20)
    dtypes: tuple[str, ...] = ("bf16", "fp32")
    warmup: int = 5
    iters: int = 20
    torch_timeout_s: float = 90.0
    stall_rank: int | None = None  # fault injection for self-tests: this rank sleeps ...
    stall_s: float = 0.0  # ... this long before its first collective
    corrupt: str = ""  # fault injection: "RANK:KIND" corrupts that rank's result (CORRUPTIONS)

    def argv(self) -> list[str]:
        """The worker flags that carry this plan to each rank."""
        out = [
            "--backend", self.backend,
            "--sizes", ",".join(str(n) for n in self.sizes),
            "--dtypes", ",".join(self.dtypes),
            "--warmup", str(self.warmup), "--iters", str(self.iters),
            "--torch-timeout", f"{self.torch_timeout_s:g}",
        ]  # fmt: skip
        if self.stall_rank is not None:
            out += ["--stall-rank", str(self.stall_rank), "--stall-s", f"{self.stall_s:g}"]
        if self.corrupt:
            out += ["--corrupt", self.corrupt]
        return out


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
    backend: str = "nccl"
    cases: list[dict[str, Any]] = field(default_factory=list)
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
    parser.add_argument(
        "--backend", choices=BACKENDS, default="nccl", help="the engine's backend (default nccl)"
    )
    parser.add_argument(
        "--sizes", type=_sizes, default=_sizes(DEFAULT_SIZES),
        help=f"buffer sizes in bytes, K/M/G suffixes (default {DEFAULT_SIZES})",
    )  # fmt: skip
    parser.add_argument(
        "--dtypes", type=_dtypes, default=_dtypes(DEFAULT_DTYPES),
        help=f"dtypes of {', '.join(DTYPES)} (default {DEFAULT_DTYPES})",
    )  # fmt: skip
    parser.add_argument("--warmup", type=_count, default=5, help="untimed all-reduces (default 5)")
    parser.add_argument("--iters", type=_positive_int, default=20, help="timed (default 20)")
    parser.add_argument(
        "--torch-timeout", type=_positive_float, default=None,
        help=f"torch.distributed's own timeout (default {TORCH_TIMEOUT_SHARE:g} x --timeout)",
    )  # fmt: skip
    # Fault injection for the self-tests' captures: start only some ranks, stall one.
    parser.add_argument("--start-ranks", type=_ranks, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--stall-rank", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--stall-s", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--corrupt", type=_corruption, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def plan_of(args: argparse.Namespace) -> Plan:
    torch_timeout = args.torch_timeout or max(1.0, args.timeout * TORCH_TIMEOUT_SHARE)
    return Plan(
        backend=args.backend,
        sizes=tuple(args.sizes),
        dtypes=tuple(args.dtypes),
        warmup=args.warmup,
        iters=args.iters,
        torch_timeout_s=torch_timeout,
        stall_rank=args.stall_rank,
        stall_s=args.stall_s,
        corrupt=args.corrupt or "",
    )


def _sizes(text: str) -> list[int]:
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", part, re.I)
        if not m or int(m[1]) == 0:
            raise argparse.ArgumentTypeError(f"{part!r} is not a size such as 4096, 4K, 32M")
        size = int(m[1]) * _UNITS[m[2].upper()]
        if size % 4:  # whole elements of every dtype, so the bytes reported are the bytes moved
            raise argparse.ArgumentTypeError(f"{part!r}: a size must be a multiple of 4 bytes")
        out.append(size)
    return out


def _dtypes(text: str) -> list[str]:
    out = [part.strip() for part in text.split(",")]
    bad = [d for d in out if d not in DTYPES]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown dtype(s) {bad}; known: {', '.join(DTYPES)}")
    return out


def _ranks(text: str) -> list[int]:
    try:
        return sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of ranks such as 0,1") from None


def _corruption(text: str) -> str:
    rank, _, kind = text.partition(":")
    if not rank.isdigit() or kind not in CORRUPTIONS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not RANK:KIND, KIND one of {', '.join(CORRUPTIONS)}"
        )
    return text


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be at least 0")
    return value


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


def default_worker_argv(rank: int, world: int, port: int, plan: Plan | None = None) -> list[str]:
    # By file path, not ``-m``: inside a candidate's image this file is mounted alone.
    return [
        sys.executable, str(Path(__file__).resolve()), "--worker",
        "--rank", str(rank), "--nprocs", str(world), "--port", str(port),
        *(plan or Plan()).argv(),
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
    plan: Plan | None = None,
    start_ranks: Sequence[int] | None = None,
) -> ProbeReport:
    """Start the ranks, echo their output, and kill every process group at the deadline.

    ``start_ranks`` (fault injection) starts only those ranks of ``nprocs``: the others never
    join, as a rank that died before its rendezvous."""
    out = out or sys.stdout
    plan = plan or Plan()
    worker_argv = worker_argv or (lambda r, w, port: default_worker_argv(r, w, port, plan))
    lock = threading.Lock()
    port = free_port()
    started = time.monotonic()
    if log_dir:
        log_dir.mkdir(parents=True, exist_ok=True)
    procs, readers, outcomes = [], [], []
    absent = [
        RankOutcome(r) for r in range(nprocs) if start_ranks is not None and r not in start_ranks
    ]
    for rank in (r for r in range(nprocs) if start_ranks is None or r in start_ranks):
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
    every = sorted([*outcomes, *absent], key=lambda o: o.rank)
    for o in every:  # time-stamped, so a stall reads from the log: how long the others waited
        _say(o.rank, nprocs, _ending(o, timed_out), out=out)
    return _report(nprocs, timeout_s, every, timed_out, time.monotonic() - started, plan)


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
    nprocs: int,
    timeout_s: float,
    outcomes: list[RankOutcome],
    timed_out: bool,
    wall_s: float,
    plan: Plan,
) -> ProbeReport:
    ranks = [_rank_entry(o) for o in outcomes]
    ok = not timed_out and all(r["ok"] for r in ranks)
    return ProbeReport(
        nprocs=nprocs,
        timeout_s=timeout_s,
        ok=ok,
        timed_out=timed_out,
        wall_s=round(wall_s, 3),
        backend=plan.backend,
        cases=cases_over_ranks(nprocs, [r.get("cases") or [] for r in ranks]),
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
        entry["error"] = (
            "rank reported no result"
            if o.lines or o.returncode is not None
            else ("rank not started")
        )
    return entry


WHERE_WRONG = ("wrong_elements", "first_wrong", "last_wrong", "found", "expected")


def cases_over_ranks(nprocs: int, per_rank: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One entry per (dtype, bytes): ok only when every rank ran it and summed right; seconds is
    the mean of the ranks' times (nccl-tests' default), algbw and busbw from it in GB/s; each
    rank's error says which rank, and ``wrong`` where that rank's wrong elements are
    (``per_rank[r]``: rank r's cases)."""
    keyed: dict[tuple[str, int], list[tuple[int, dict[str, Any]]]] = {}
    for rank, cases in enumerate(per_rank):
        for case in cases:
            keyed.setdefault((case["dtype"], case["bytes"]), []).append((rank, case))
    out = []
    for (dtype, size), seen in keyed.items():
        ok = len(seen) == nprocs and all(c.get("ok") for _, c in seen)
        times = [c["seconds"] for _, c in seen if c.get("seconds")]
        entry: dict[str, Any] = {"dtype": dtype, "bytes": size, "ok": ok, "ranks": len(seen)}
        if ok and len(times) == nprocs:
            entry.update(bandwidth(size, sum(times) / len(times), nprocs))
        errors = [f"rank {r}: {c['error']}" for r, c in seen if c.get("error")]
        if errors:
            entry["error"] = "; ".join(errors)
        wrong = [
            {"rank": r, **{k: c[k] for k in WHERE_WRONG if k in c}}
            for r, c in seen
            if c.get("wrong_elements")
        ]
        if wrong:
            entry["wrong"] = wrong
        out.append(entry)
    return out


def bandwidth(size: int, seconds: float, nprocs: int) -> dict[str, float]:
    """nccl-tests' figures for an all-reduce of ``size`` bytes taking ``seconds``."""
    algbw = size / seconds / 1e9
    return {
        "seconds": seconds,
        "algbw_gbps": round(algbw, 4),
        "busbw_gbps": round(algbw * 2 * (nprocs - 1) / nprocs, 4),
    }


def _is_prime(n: int) -> bool:
    return n >= 2 and all(n % d for d in range(2, int(n**0.5) + 1))


def fill_modulus(dtype: str, world: int) -> int | None:
    """The prime the fill runs modulo: the largest p for which the sum of ``world`` values below
    p stays exact in ``dtype`` (world x (p-1) <= the dtype's exact-integer limit), capped; None
    when not even p = 2 is exact (a world too large for the dtype)."""
    top = min(EXACT_UP_TO[dtype] // world + 1, FILL_PRIME_CAP)
    return next((p for p in range(top, 1, -1) if _is_prime(p)), None)


def fill_value(rank: int, index: Any, modulus: int) -> Any:
    """What rank ``rank`` puts at element ``index`` (an int, or a tensor of positions: the
    same arithmetic): different per rank and per position."""
    return ((rank + 1) * (index % modulus) + rank) % modulus


def expected_sum(index: Any, world: int, modulus: int) -> Any:
    """Element ``index`` of the right all-reduce sum (an int, or a tensor of them)."""
    total = fill_value(0, index, modulus)
    for rank in range(1, world):
        total = total + fill_value(rank, index, modulus)
    return total


def corrupted(values: list[Any], kind: str) -> list[Any]:
    """``values`` as a faulty collective would leave them (``CORRUPTIONS``), for the tests."""
    c = max(1, len(values) // CHUNKS)
    if kind == "swap":
        return values[c : 2 * c] + values[:c] + values[2 * c :]
    if kind == "duplicate":
        return values[:c] + values[:c] + values[2 * c :]
    return values[-c:] + values[:-c]  # shift: every chunk one place over


def worker(rank: int, world: int, port: int, plan: Plan) -> int:
    """One rank: init the backend over a loopback rendezvous, all-reduce every case, check every
    element against the exact sum."""
    started = time.monotonic()
    result: dict[str, Any] = {"rank": rank, "ok": False, "backend": plan.backend, "cases": []}
    try:
        result.update(_all_reduce(rank, world, port, plan, result["cases"]))
        result["ok"] = bool(result["cases"]) and all(c["ok"] for c in result["cases"])
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
    result["wall_s"] = round(time.monotonic() - started, 3)
    print(RESULT_TAG + json.dumps(result), flush=True)
    return EXIT_OK if result["ok"] else EXIT_FAILED


def _say(rank: int, world: int, text: str, out: TextIO | None = None) -> None:
    """A time-stamped progress line; the diagnosis reads stalls from these stamps."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())
    print(f"[{stamp}] {PROGRESS} rank {rank}/{world}: {text}", file=out or sys.stdout, flush=True)


def _ending(o: RankOutcome, timed_out: bool) -> str:
    if o.returncode is None:
        return "never started (not launched)"
    if o.returncode < 0:
        return f"killed by signal {-o.returncode}" + (
            " at the probe's timeout" if timed_out else ""
        )
    return f"exited with status {o.returncode}"


def _all_reduce(
    rank: int, world: int, port: int, plan: Plan, cases: list[dict[str, Any]]
) -> dict[str, Any]:
    import datetime

    import torch
    import torch.distributed as dist

    facts: dict[str, Any] = {"torch": torch.__version__}
    if plan.backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA is not available to torch")
        device = f"cuda:{rank % torch.cuda.device_count()}"
        torch.cuda.set_device(device)
        facts["nccl"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    else:
        device = "cpu"
    facts["device"] = device
    _say(rank, world, f"init_process_group backend={plan.backend} device={device} START")
    # device_id makes NCCL build its communicator here (eagerly) rather than inside the first
    # collective, so an init failure and a collective failure read apart in the log.
    eager = {"device_id": torch.device(device)} if plan.backend == "nccl" else {}
    dist.init_process_group(
        plan.backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=plan.torch_timeout_s),
        **eager,
    )
    _say(rank, world, f"init_process_group backend={plan.backend} COMPLETE")
    if plan.stall_rank == rank:
        _say(rank, world, f"stalling {plan.stall_s:g} s before the first collective (injected)")
        time.sleep(plan.stall_s)
    sync = torch.cuda.synchronize if plan.backend == "nccl" else (lambda: None)
    for dtype in plan.dtypes:
        for size in plan.sizes:
            case = _one_case(rank, world, plan, dtype, size, device, sync)
            cases.append(case)
    dist.destroy_process_group()  # not after a failure: destroying a broken comm can hang
    return facts


_TORCH_DTYPES = {"bf16": "bfloat16", "fp32": "float32", "fp16": "float16"}


def _one_case(
    rank: int, world: int, plan: Plan, dtype: str, size: int, device: str, sync: Callable[[], Any]
) -> dict[str, Any]:
    """Check one all-reduce's every element against its own exact sum, then time the same
    buffer (in place: the values grow, the timing does not care; nccl-tests does not check
    timed runs either)."""
    import torch
    import torch.distributed as dist

    torch_dtype = getattr(torch, _TORCH_DTYPES[dtype])
    count = size // torch.tensor([], dtype=torch_dtype).element_size()
    modulus = fill_modulus(dtype, world) or 2
    label = f"all_reduce {dtype} {size} B"
    _say(rank, world, f"{label} START")
    case: dict[str, Any] = {"dtype": dtype, "bytes": size, "count": count, "modulus": modulus}
    index = torch.arange(count, dtype=torch.int32, device=device)  # values stay far below 2^31
    t = fill_value(rank, index, modulus).to(torch_dtype)
    dist.all_reduce(t)
    sync()
    _inject(rank, world, plan, t, case)
    case.update(_wrong_elements(t, expected_sum(index, world, modulus).to(torch_dtype)))
    if fill_modulus(dtype, world) is None:  # a suite limit, not the collective's
        case.update(ok=False, error=f"{world} ranks: no fill whose sum is exact in {dtype}")
    for _ in range(plan.warmup):
        dist.all_reduce(t)
    sync()
    began = time.perf_counter()
    for _ in range(plan.iters):
        dist.all_reduce(t)
    sync()
    case["seconds"] = (time.perf_counter() - began) / plan.iters
    case["iters"] = plan.iters
    figures = bandwidth(size, case["seconds"], world)
    _say(rank, world, f"{label} COMPLETE ok={case['ok']} {figures['seconds'] * 1e6:.1f} us"
         f" busbw {figures['busbw_gbps']:.3f} GB/s")  # fmt: skip
    return case


def _inject(rank: int, world: int, plan: Plan, t: Any, case: dict[str, Any]) -> None:
    """The self-tests' ``--corrupt RANK:KIND``: this rank's summed buffer, corrupted in place
    (``corrupted`` says how), and the case says so."""
    target, _, kind = plan.corrupt.partition(":")
    if not plan.corrupt or int(target) != rank:
        return
    import torch

    c = max(1, t.numel() // CHUNKS)
    if kind == "swap":
        t[: 2 * c] = torch.cat([t[c : 2 * c], t[:c]])
    elif kind == "duplicate":
        t[c : 2 * c] = t[:c].clone()
    else:
        t.copy_(torch.roll(t, c))
    case["injected"] = kind
    _say(rank, world, f"corrupting the summed buffer: {kind} of a {c}-element chunk (injected)")


def _wrong_elements(t: Any, want: Any) -> dict[str, Any]:
    """How many elements differ from their expected sum, and where: the first (its value and
    the one expected) and the last."""
    bad = (t != want).nonzero().flatten()  # small integers: exact in the dtype itself
    found: dict[str, Any] = {"ok": bad.numel() == 0, "wrong_elements": int(bad.numel())}
    if bad.numel():
        first, last = int(bad[0]), int(bad[-1])
        held, expected = float(t[first]), int(want[first])
        found |= {"first_wrong": first, "last_wrong": last, "found": held, "expected": expected}
        found["error"] = (
            f"{bad.numel()} of {t.numel()} elements wrong, elements {first}..{last}; element "
            f"{first} holds {held:g}, expected {expected}"
        )
    return found


def table(report: ProbeReport) -> list[str]:
    """The human lines: one per case, as nccl-tests prints them."""
    lines = [f"{'dtype':>6} {'bytes':>10} {'time(us)':>10} {'algbw':>8} {'busbw':>8}  ok"]
    for c in report.cases:
        if "seconds" in c:
            lines.append(
                f"{c['dtype']:>6} {c['bytes']:>10} {c['seconds'] * 1e6:>10.1f}"
                f" {c['algbw_gbps']:>8.3f} {c['busbw_gbps']:>8.3f}  {c['ok']}"
            )
        else:
            lines.append(f"{c['dtype']:>6} {c['bytes']:>10} {'-':>10} {'-':>8} {'-':>8}  {c['ok']}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    plan = plan_of(args)
    if args.worker:
        return worker(args.rank, args.nprocs, args.port, plan)
    report = launch(
        args.nprocs, args.timeout, log_dir=args.log_dir, plan=plan, start_ranks=args.start_ranks
    )
    print(f"nccl_probe: backend {plan.backend}, {args.nprocs} rank(s), GB/s as nccl-tests:")
    for line in table(report):
        print(f"nccl_probe: {line}")
    for rank in report.ranks:
        if rank.get("error"):
            print(f"nccl_probe: rank {rank['rank']}: {rank['error']}")
    if report.timed_out:
        print(f"nccl_probe: timed out after {args.timeout:g} s; killed all ranks", flush=True)
    print(REPORT_TAG + json.dumps(asdict(report), sort_keys=True), flush=True)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
