"""Rules for ranks that did not all arrive: a rank that never joined while the others waited
(``missing_rank``), and a hang after every rank finished init, when the first collective never
returns (``first_collective_hang``).

Read from any of the shapes the suite sees, so the same two faults are named on NCCL (GPUs) and
on gloo (vLLM's CPU engine): NCCL's ``Init START`` / ``Init COMPLETE`` lines, torch.distributed's
own errors (its TCP store's "K/W clients joined", gloo's "Timed out waiting Nms for recv"), the
suite probe's progress lines (``tp2qual-probe rank R/W: ...``, serving/nccl_probe.py) and vLLM's
worker lines (``(Worker_TP1 pid=…)`` prefixes, parallel_state's rank assignment). A stall is read
from the log's own timestamps, as in ``hangs``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tp2qual.checks.diagnosis.model import HANG_AFTER_S, Context, Finding, Line, evidence_of
from tp2qual.engines import any_engine_line

# --- what each shape says about a rank ------------------------------------------------------

_NCCL_INIT = re.compile(
    r"\brank (?P<rank>\d+) nranks (?P<world>\d+) cudaDev \d+.*? - Init (?P<phase>START|COMPLETE)\b"
)
_PROBE = re.compile(
    r"tp2qual-probe rank (?P<rank>\d+)/(?P<world>\d+): (?P<what>init_process_group \S+"
    r"(?: device=\S+)? (?P<phase>START|COMPLETE)|all_reduce (?P<case>\S+ \d+ B) (?P<coll>START"
    r"|COMPLETE))"
)
# The engines' lines as their ranks join (vLLM's: tp2qual/engines/vllm.py, 0.32.0
# parallel_state.py, multiproc_executor.py): a rank starts its init, its groups exist, its
# worker is named. The log's engine is not known: every engine's lines are read.
_ENGINE_WORKER = any_engine_line("worker_named")
_ENGINE_WORLD = any_engine_line("rank_starts_short")
_ENGINE_READY = any_engine_line("group_formed")

# torch's TCP store (rank 0 hosts it): a rank that never connected.
_STORE_WAIT = re.compile(
    r"Timed out after (?P<s>\d+) seconds waiting for clients\. (?P<k>\d+)/(?P<w>\d+) clients joined"
)
# A collective that never returned, in the words of the backend or the engine.
_COLL_TIMEOUT = re.compile(
    r"Timed out waiting (?P<ms>\d+)ms for (?:recv|send) operation to complete"
    r"|Watchdog caught collective operation timeout"
    r"|No available shared memory broadcast block found in \d+ second"
)
_COLL_ISSUED = re.compile(r"NCCL INFO \w+: opCount ")  # NCCL_DEBUG_SUBSYS=COLL: hangs.py's rule
_PROGRESS = re.compile(
    r"all_reduce \S+ \d+ B COMPLETE|Application startup complete|Uvicorn running"
    r"|\"(?:GET|POST) /\S+ HTTP/1\.[01]\" 200|Avg prompt throughput"
)


# Lines that say only "still waiting" (launchers' heartbeats, the probe's end-of-rank lines, an
# engine waiting on its workers): they mark time, they are not work done.
_WAITING = re.compile(
    r"\bwaiting\b|tp2qual-probe rank \d+/\d+: (?:exited|killed|never started)|every rank ended",
    re.I,
)


def _ranks(ctx: Context, phase: str) -> tuple[dict[int, Line], int | None]:
    """Each rank's first line in ``phase`` (``START``: it joined; ``COMPLETE``: its init
    returned), and the world size the lines state."""
    seen: dict[int, Line] = {}
    world = None
    for ln in ctx.lines:
        for rank, size in _rank_facts(ln.text, phase):
            seen.setdefault(rank, ln)
            world = size or world
    return seen, world


def _rank_facts(text: str, phase: str) -> Iterable[tuple[int, int | None]]:
    m = _NCCL_INIT.search(text)
    if m and m["phase"] == phase:
        yield int(m["rank"]), int(m["world"])
    m = _PROBE.search(text)
    if m and m["phase"] == phase:
        yield int(m["rank"]), int(m["world"])
    if phase == "START":
        if m := _ENGINE_WORKER.search(text):
            yield int(m["rank"]), None
        if m := _ENGINE_WORLD.search(text):
            yield int(m["rank"]), int(m["world"])
    elif m := _ENGINE_READY.search(text):
        world = m.groupdict().get("world")  # SGLang's 'Init parallel ends' names none
        yield int(m["rank"]), int(world) if world else None


def _world(ctx: Context, *stated: int | None) -> int | None:
    for size in (ctx.tp, *stated):
        if size:
            return size
    for ln in ctx.grep(_STORE_WAIT):
        m = _STORE_WAIT.search(ln.text)
        return int(m["w"]) if m else None
    return None


def _stall(ctx: Context, since: Line) -> float | None:
    """Seconds from ``since`` to the log's last time-stamped line, plus the silence after the
    log's last line when it was read (None without stamps)."""
    last = next((ln.ts for ln in reversed(ctx.lines) if ln.ts), None)
    if since.ts is None or last is None:
        return None
    return (last - since.ts).total_seconds() + ctx.quiet_s


def ranks_short(ctx: Context) -> bool:
    """Fewer ranks finished init than the world has (False when the world is one rank or
    unknown): the log does not show every rank came up."""
    ready, stated = _ranks(ctx, "COMPLETE")
    world = _world(ctx, stated)
    return bool(world and world > 1 and not set(ready) >= set(range(world)))


# --- a rank that never joined ---------------------------------------------------------------


def rule_missing_rank(ctx: Context) -> list[Finding]:
    joined, stated = _ranks(ctx, "START")
    ready, stated_ready = _ranks(ctx, "COMPLETE")
    world = _world(ctx, stated, stated_ready)
    if not world or world < 2:
        return []
    store = ctx.grep(_STORE_WAIT)
    missing = sorted(set(range(world)) - set(joined))
    if store:
        m = _STORE_WAIT.search(store[0].text)
        assert m is not None
        absent = int(m["w"]) - int(m["k"])
        who = f"rank(s) {missing}" if len(missing) == absent else f"{absent} rank(s)"
        why = (
            f"{who} of {world} never joined the rendezvous: torch's TCP store waited"
            f" {m['s']} s and only {m['k']}/{m['w']} ranks connected"
        )
        return [_missing(ctx, why, [*_first(joined), store[0]])]
    if not joined or not missing or set(ready) >= set(range(world)):
        return []
    latest = max(joined.values(), key=lambda ln: ln.no)
    stall = _stall(ctx, latest)
    if stall is None or stall < HANG_AFTER_S:
        return []
    silent = f" ({ctx.quiet_s:.0f} s of it silent, until it was read)" if ctx.quiet_s else ""
    why = (
        f"rank(s) {missing} of {world} never joined: rank(s) {sorted(joined)} started init and"
        f" the log went on for {stall:.0f} s{silent} with no init line from rank(s) {missing}"
    )
    return [_missing(ctx, why, [*_first(joined), ctx.lines[-1]])]


def _first(lines: dict[int, Line]) -> list[Line]:
    return [lines[r] for r in sorted(lines)]


def _missing(ctx: Context, why: str, lines: list[Line]) -> Finding:
    return Finding(
        "missing_rank",
        why,
        evidence_of(sorted(set(lines), key=lambda ln: ln.no)),
        "find why the missing rank did not start or died before its rendezvous: its own log and"
        " exit status (an exception or OOM before init, a launcher that started fewer ranks than"
        " the world size); every rank must start with the same world size and rendezvous"
        " address; the waiting ranks are healthy",
        "high",
    )


# --- every rank initialised, the first collective never returned -----------------------------


def rule_first_collective_hang(ctx: Context) -> list[Finding]:
    ready, stated = _ranks(ctx, "COMPLETE")
    world = _world(ctx, stated)
    if not world or world < 2 or not set(ready) >= set(range(world)):
        return []
    last_ready = max(ready.values(), key=lambda ln: ln.no)
    after = ctx.lines[last_ready.no :]
    if any(_COLL_ISSUED.search(ln.text) or _PROGRESS.search(ln.text) for ln in after):
        return []  # a collective completed (or NCCL's own COLL lines: hangs.rule_collective_hang)
    timeouts = [ln for ln in after if _COLL_TIMEOUT.search(ln.text)]
    # Quiet since the last line of work: a server still loading its weights is not stalled.
    busy = [ln for ln in after if ln.text.strip() and not _WAITING.search(ln.text)]
    stall = _stall(ctx, busy[-1] if busy else last_ready)
    if not timeouts and (stall is None or stall < HANG_AFTER_S):
        return []
    first_ready = min(ready.values(), key=lambda ln: ln.no)
    entered = _entered_first_collective(ctx.lines[first_ready.no - 1 :])
    lagging = sorted(set(range(world)) - set(entered)) if entered else []
    if lagging:
        who = f"; rank(s) {lagging} never entered it (rank(s) {sorted(entered)} did and waited)"
    else:
        who = ""
    if timeouts:
        said = _COLL_TIMEOUT.search(timeouts[0].text)
        how = f"the backend timed out waiting for it ({said[0] if said else 'timeout'})"
    else:
        how = f"the log went on for {stall:.0f} s after init with no work and no collective done"
    return [
        Finding(
            "first_collective_hang",
            f"every rank (0..{world - 1}) finished init, and the first collective never"
            f" returned: {how}{who}",
            evidence_of([*_first(ready), *(timeouts[:1] or [ctx.lines[-1]])]),
            _hang_remedy(ctx, lagging),
            "high" if timeouts or lagging else "medium",
        )
    ]


def _entered_first_collective(after: tuple[Line, ...]) -> dict[int, Line]:
    entered: dict[int, Line] = {}
    first_case = None
    for ln in after:
        m = _PROBE.search(ln.text)
        if not m or m["coll"] != "START":
            continue
        first_case = first_case or m["case"]
        if m["case"] == first_case:
            entered.setdefault(int(m["rank"]), ln)
    return entered


def _hang_remedy(ctx: Context, lagging: list[int]) -> str:
    if lagging:
        return (
            f"rank(s) {lagging} are alive but never issued the collective: read their own log"
            " and stack (py-spy dump) for what held them; every rank must issue the same"
            " collectives in the same order"
        )
    debug = (
        "NCCL_DEBUG_SUBSYS=INIT,COLL names the rank that never issued it"
        if ctx.at_info
        else "on NCCL, rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL to name the rank"
        " that never issued it"
    )
    return (
        "the communicator came up but data never flowed: one rank is stuck before the"
        f" collective, or the transport moves nothing (SHM segment, P2P across PCIe); {debug};"
        " a py-spy dump of each rank shows where it waits"
    )
