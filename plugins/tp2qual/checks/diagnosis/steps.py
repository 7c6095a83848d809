"""A model step that never finished (``stalled_step``): every rank came up and served, then one
step of the engine hung, the engine core waiting on its workers' answer, until it gave up or the
request's budget ran out.

Read from the engine's own lines (``Engine.step_watch``; vLLM's: ``tp2qual/engines/vllm.py``,
0.32.0 ``shm_broadcast.py``, ``multiproc_executor.py``): the engine core says every
``VLLM_RINGBUFFER_WARNING_INTERVAL`` seconds that it still waits, and gives up with
``TimeoutError: RPC call to execute_model timed out.``. A wait is also logged for a step that is
only slow (the first step on the CPU compiles), so only the waits of the last step count: those
after the last answered request, each one interval after the one before, and none answered after
them. Waits before the server ever answered are its start-up's
(``ranks.rule_first_collective_hang``), unless it gave up on a model step. Neither line names a
rank. The log's engine is not known: each engine that watches its steps is tried in turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tp2qual.checks.diagnosis.model import Context, Finding, Line, evidence_of
from tp2qual.engines import StepWatch, all_engines

# (engine title, its watch, its wait line, its giving-up line), for each engine that has them.
_WATCHED = tuple(
    (e.title, e.step_watch, re.compile(e.step_watch.wait), re.compile(e.step_watch.gave_up))
    for e in all_engines()
    if e.step_watch is not None
)
_ANSWERED = re.compile(r"\"(?:GET|POST) /\S+ HTTP/1\.[01]\" 200")
_SLACK = 1.5  # consecutive waits of one step are one interval apart, give or take a busy core


@dataclass(frozen=True)
class StalledStep:
    """The last step's waits as the engine logged them, and its giving up, if it did."""

    waits: tuple[Line, ...]
    interval_s: int
    gave_up: Line | None
    method: str | None  # the call it gave up on (``execute_model``)
    engine: str  # the title of the engine whose lines these are
    watch: StepWatch

    @property
    def waited_s(self) -> int:
        return len(self.waits) * self.interval_s

    def describe(self) -> str:
        """One sentence: how long the engine waited, whether it gave up, what it cannot say."""
        said = self.watch.wait_said.format(s=self.interval_s)
        waited = (
            f"{self.watch.waiter} waited at least {self.waited_s} s for its workers' answer"
            f" ({len(self.waits)} x '{said}')"
            if self.waits
            else f"{self.watch.waiter} waited for its workers' answer"
        )
        if self.gave_up is not None:
            how = f"{waited}, then gave up ('{self.watch.gave_up_said.format(method=self.method)}')"
        else:
            how = f"{waited} and has heard nothing since"
        return (
            f"a model step never finished: {how}; a worker stalled in the step or in its"
            f" collective, and {self.engine}'s lines do not say which rank ({self.watch.no_rank})"
        )


def stalled_step(lines: Sequence[Line]) -> StalledStep | None:
    """The step the log shows hanging at its end (or where the engine gave up), else None: in
    the lines of the first engine (in ``ENGINES``' order) whose lines show one."""
    for engine, watch, wait, gave_up_line in _WATCHED:
        if found := _stalled(lines, engine, watch, wait, gave_up_line):
            return found
    return None


def _stalled(
    lines: Sequence[Line],
    engine: str,
    watch: StepWatch,
    wait: re.Pattern[str],
    gave_up_line: re.Pattern[str],
) -> StalledStep | None:
    gave_up = next((ln for ln in lines if gave_up_line.search(ln.text)), None)
    before = lines[: gave_up.no - 1] if gave_up else lines
    answered = max((ln.no for ln in before if _ANSWERED.search(ln.text)), default=0)
    waits = [ln for ln in before if ln.no > answered and wait.search(ln.text)]
    if gave_up is None and (not waits or not answered):
        return None  # before it served: an RPC of its start-up (``first_collective_hang``)
    interval = int(wait.search(waits[-1].text)["s"]) if waits else 0  # type: ignore[index]
    run = _last_run(waits, interval)  # all after the last answer: a slow step answered is out
    method = gave_up_line.search(gave_up.text)["method"] if gave_up else None  # type: ignore[index]
    return StalledStep(tuple(run), interval, gave_up, method, engine, watch)


def _last_run(waits: list[Line], interval: int) -> list[Line]:
    """The trailing waits one interval apart: one step's (an earlier slow step's are older)."""
    run = waits[-1:]
    for earlier in reversed(waits[:-1]):
        if earlier.ts is None or run[0].ts is None:
            break
        if (run[0].ts - earlier.ts).total_seconds() > interval * _SLACK + 1:
            break
        run.insert(0, earlier)
    return run


def rule_stalled_step(ctx: Context) -> list[Finding]:
    found = stalled_step(ctx.lines)
    if found is None:
        return []
    watch = found.watch
    var = watch.timeout_var
    bound = (
        f"{var}={ctx.settings[var]} here"
        if var in ctx.settings
        else f"{var}, default {watch.timeout_default_s}"
    )
    shown = [*found.waits[:1], *found.waits[-1:], *([found.gave_up] if found.gave_up else [])]
    return [
        Finding(
            "stalled_step",
            found.describe(),
            evidence_of(sorted(set(shown), key=lambda ln: ln.no)),
            "one worker is stuck inside the step, or the ranks wait on each other in a collective"
            " (a rank that took another path, a transport that moves nothing): a py-spy dump of"
            f" each worker process ({watch.worker}) while it hangs shows where each waits, and"
            " the one not in the collective is the stalled rank; the engine gives up after"
            f" {bound} and says it still waits every {watch.interval_var} s",
            "high" if found.gave_up else "medium",
        )
    ]
