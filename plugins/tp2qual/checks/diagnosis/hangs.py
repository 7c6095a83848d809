"""Rules for what did not finish: NCCL init that never completed, a collective issued and never
completed (read from the log's own timestamps), known harmless warnings, and warnings or
torch.distributed errors no other rule explains."""

from __future__ import annotations

import re

from tp2qual.checks.diagnosis.model import (
    HANG_AFTER_S,
    INCOMPLETE,
    NOTICE,
    Context,
    Finding,
    Line,
    evidence_of,
    p2p_off,
)
from tp2qual.engines import all_engines

_INIT = re.compile(
    r"\brank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev \d+.*?"
    r"(?:commId (?P<comm>0x[0-9a-fA-F]+))?.*? - Init (?P<phase>START|COMPLETE)\b"
)
_COLL = re.compile(
    r"NCCL INFO (?P<op>\w+): opCount (?P<n>[0-9a-fx]+) .*?comm (?P<comm>0x[0-9a-f]+)"
)
_RANK_TAG = re.compile(r"\[rank(\d+)\]|\bTP(\d+)\b|\brank (\d+)\b")
_WATCHDOG = re.compile(
    r"Watchdog caught collective operation timeout|No available shared memory broadcast block"
    r" found in \d+ second|ProcessGroupNCCL's watchdog got stuck"
)
_PROGRESS = re.compile(
    r"TP2QUAL_PROBE_RESULT|Application startup complete|The server is fired up|Uvicorn running"
    r"|\"(?:GET|POST) /\S+ HTTP/1\.[01]\" 200|Avg prompt throughput"
)


def rule_init_pending(ctx: Context) -> list[Finding]:
    started: dict[tuple[str, int], Line] = {}
    for ln in ctx.lines:
        m = _INIT.search(ln.text)
        if not m:
            continue
        key = (m["comm"] or f"nranks{m['nranks']}", int(m["rank"]))
        if m["phase"] == "START":
            started[key] = ln
        else:
            started.pop(key, None)
    if not started:
        return []
    first = min(started.values(), key=lambda ln: ln.no)
    ranks = sorted({rank for _, rank in started})
    stall = _stall_after(ctx, first)
    evidence = evidence_of(sorted(started.values(), key=lambda ln: ln.no))
    if stall is not None and stall >= HANG_AFTER_S:
        return [
            Finding(
                "init_hang",
                f"rank(s) {ranks} started NCCL init (Init START) and the log went on for"
                f" {stall:.0f} s without Init COMPLETE: a peer never joined",
                evidence + evidence_of([ctx.lines[-1]], 1),
                _init_hang_remedy(ctx),
                "high",
            )
        ]
    return [
        Finding(
            "init_incomplete",
            f"rank(s) {ranks} started NCCL init and the log ends without Init COMPLETE or an"
            " error: the capture stopped early, or the rank was still waiting",
            evidence,
            "capture the log until the ranks finish or fail (a longer window); if it was cut by"
            " a timeout, that is a hang: " + _init_hang_remedy(ctx),
            "medium",
            INCOMPLETE,
        )
    ]


def _init_hang_remedy(ctx: Context) -> str:
    steps = ["check that every rank started and reached NCCL init (each rank's own log)"]
    if ctx.container is None or not (
        ctx.container.get("ipc_host") or ctx.container.get("shm_size")
    ):
        steps.append("give the container ipc=host or a large shm_size")
    if not p2p_off(ctx):
        steps.append("set NCCL_P2P_DISABLE=1 if P2P channels were set up")
    return "; ".join(steps)


def _stall_after(ctx: Context, line: Line) -> float | None:
    """Seconds from ``line`` to the last time-stamped line, None when the log has no stamps."""
    last = next((ln.ts for ln in reversed(ctx.lines) if ln.ts), None)
    if line.ts is None or last is None:
        return None
    return (last - line.ts).total_seconds()


# vLLM's wait on its workers, logged for a slow step too (the first step on the CPU compiles).
_WAIT_ONLY = re.compile(r"No available shared memory broadcast block")
_WORKER_SAID = re.compile(r"^\((?:Worker|VllmWorker)\S* (?:rank=\d+ )?pid=\d+\)")


def _went_on(ctx: Context, wait: Line) -> bool:
    """A worker spoke after the wait, or in the same second (the engine core logs its wait as it
    wakes): the step it waited on finished, so it was slow, not hung."""
    later = [
        ln
        for ln in ctx.lines
        if ln.no > wait.no or (ln.ts is not None and wait.ts is not None and ln.ts >= wait.ts)
    ]
    return any(_WORKER_SAID.search(ln.text) for ln in later)


def rule_collective_hang(ctx: Context) -> list[Finding]:
    watchdog = [
        ln for ln in ctx.grep(_WATCHDOG) if not (_WAIT_ONLY.search(ln.text) and _went_on(ctx, ln))
    ]
    if watchdog:
        return [_collective_finding(ctx, watchdog, "the engine's watchdog reports it", "high")]
    issued = [ln for ln in ctx.lines if _COLL.search(ln.text)]
    if not issued:
        return []
    last = issued[-1]
    later = [ln for ln in ctx.lines[last.no :] if _PROGRESS.search(ln.text)]
    stall = _stall_after(ctx, last)
    if later or stall is None or stall < HANG_AFTER_S:
        return []
    lag = _lagging_ranks(issued)
    why = f"the log went on for {stall:.0f} s after it with no progress" + lag
    return [_collective_finding(ctx, [last, ctx.lines[-1]], why, "high" if lag else "medium")]


def _lagging_ranks(issued: list[Line]) -> str:
    counts: dict[int, int] = {}
    for ln in issued:
        tag = _RANK_TAG.search(ln.text)
        rank = int(next(g for g in tag.groups() if g)) if tag else 0
        found = _COLL.search(ln.text)
        if found is None:
            continue
        counts[rank] = max(counts.get(rank, -1), int(found["n"], 0))
    top = max(counts.values())
    behind = sorted(r for r, n in counts.items() if n < top)
    return f"; rank(s) {behind} never issued opCount {top}" if behind else ""


def _collective_finding(ctx: Context, lines: list[Line], why: str, confidence: str) -> Finding:
    via = sorted({m.group(1) for ln in ctx.lines if (m := re.search(r" via (\S+)", ln.text))})
    p2p = [v for v in via if v.startswith("P2P")]
    if p2p and not p2p_off(ctx):
        remedy = f"P2P channels were set up ({', '.join(p2p)}): set NCCL_P2P_DISABLE=1"
    else:
        used = f" (transport: {', '.join(via)})" if via else ""
        debug = (
            "NCCL_DEBUG_SUBSYS=INIT,COLL shows each rank's collectives"
            if ctx.at_info
            else "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL"
        )
        remedy = (
            f"a rank stopped or diverged{used}: read the lagging rank's own log for its error;"
            f" every rank must issue the same collectives; {debug}"
        )
    return Finding(
        "collective_hang",
        f"a collective was issued after NCCL init and never completed: {why}",
        evidence_of(lines),
        remedy,
        confidence,
    )


# -- harmless notices, the remaining NCCL warnings, torch's wrapper error ----------------------

HARMLESS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    (
        "nccl_ras_bind",
        re.compile(r"NCCL WARN Call to bind failed: Address already in use"),
        "NCCL's RAS listener found its port taken; NCCL carries on without it",
    ),
    # Each engine that says it turned its own all-reduce off (vLLM: tp2qual/engines/vllm.py).
    *(
        (
            f"{engine.kind}_custom_allreduce_off",
            engine.log_line("custom_allreduce_off"),
            f"{engine.title} uses NCCL's all-reduce instead of its own P2P kernel: a notice,"
            " not an NCCL failure",
        )
        for engine in all_engines()
        if "custom_allreduce_off" in engine.log_lines
    ),
    (
        "torch_no_destroy_pg",
        re.compile(r"destroy_process_group\(\) was not called before program exit"),
        "PyTorch's shutdown reminder; says nothing about NCCL's health",
    ),
)


def rule_harmless(ctx: Context) -> list[Finding]:
    found = []
    for rule, pattern, why in HARMLESS:
        hits = ctx.grep(pattern)
        if hits:
            found.append(Finding(rule, why, evidence_of(hits, 2), "none needed", "high", NOTICE))
    return found


_WARN = re.compile(r"NCCL WARN\b")
_DIST_ERROR = re.compile(r"DistBackendError|\bNCCL error(?: in)?:|ncclSystemError|ncclUnhandled")
# The suite's probe reports each rank's result (serving/nccl_probe.py, checks/probe_result.py).
_PROBE_FAILED = re.compile(r'TP2QUAL_PROBE_RESULT .*"ok": ?false')


def probe_failed(ctx: Context) -> bool:
    """A rank of the suite's probe reported its own failure."""
    return bool(ctx.grep(_PROBE_FAILED))


def other_warnings(ctx: Context, explained: set[int], severity: str = NOTICE) -> list[Finding]:
    """NCCL warnings no rule explains, each message once. NCCL warns of things it survives
    (a fallback, a missing plugin, a retried socket), so one is a notice while the ranks came
    up; ``severity`` is FAILURE when the caller knows they did not: then it is the lead."""
    found: dict[str, Finding] = {}
    for ln in ctx.grep(_WARN):
        if ln.no in explained:
            continue
        warn = _WARN.search(ln.text)
        message = ln.text[warn.end() :].strip() if warn else ln.text.strip()
        where = (
            "the NCCL INFO lines just before it show the call path"
            if ctx.at_info
            else "rerun the probe with NCCL_DEBUG=INFO to see the call path"
        )
        found.setdefault(
            message,
            Finding(
                "nccl_warn",
                f"NCCL warned: {message} (no rule explains it)",
                evidence_of([ln]),
                where,
                "low",
                severity,
            ),
        )
    return list(found.values())


def dist_error(ctx: Context, named: list[Finding]) -> list[Finding]:
    hits = ctx.grep(_DIST_ERROR)
    if not hits:
        return []
    if named:
        remedy = f"follows from {named[0].rule}: see its remedy"
    elif ctx.at_info:
        remedy = "the NCCL WARN / 'Last error:' lines around it name the failing call"
    else:
        remedy = "rerun with NCCL_DEBUG=INFO to get NCCL's own warning"
    return [
        Finding(
            "dist_backend_error",
            "torch.distributed reported an NCCL error",
            evidence_of(hits, 3),
            remedy,
            "low" if named else "medium",
        )
    ]
