"""Gate 05's power: the tool-call failure rate N passing calls can exclude, and the verdict on
one mode's repeated calls.

When all N independent calls pass, the exact one-sided upper bound on the failure rate at
confidence 1 - alpha is ``1 - alpha ** (1 / N)`` (Clopper-Pearson with no failures; about
3 / N at 95 %, the "rule of three"). A mode whose N cannot exclude the candidate's stated
tolerance (``max_failure_rate``) passes on the calls it saw and says "not judged: no power"
for the rate, never that the rate holds. Any failed call fails the mode. Pure: the gate and
``verify`` (evidence/rederive/tool_calls.py) call ``judge_repeats`` on the same outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tp2qual.checks.verdict import Verdict

ALPHA = 0.05  # one-sided: 95 % confidence


def excluded_rate(n: int, alpha: float = ALPHA) -> float:
    """The failure rate N passing calls exclude at confidence 1 - alpha (one-sided, exact)."""
    if n < 1:
        return 1.0
    return 1.0 - alpha ** (1.0 / n)


def repeats_needed(tolerance: float, alpha: float = ALPHA) -> int:
    """The fewest passing calls that exclude a failure rate of ``tolerance`` (0 < tolerance < 1)."""
    if not 0.0 < tolerance < 1.0:
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance}")
    return math.ceil(math.log(alpha) / math.log(1.0 - tolerance) - 1e-12)


def power_statement(n: int, tolerance: float, alpha: float = ALPHA) -> tuple[bool, str]:
    """Whether N passing calls judge the tolerance, and the sentence that says so."""
    bound = excluded_rate(n, alpha)
    confidence = f"{(1 - alpha) * 100:g} %"
    if bound <= tolerance:
        return True, (
            f"{n} of {n} passed: a failure rate above {bound:.3f} excluded at {confidence} "
            f"(tolerance {tolerance})"
        )
    return False, (
        f"not judged: no power: {n} passing calls exclude only failure rates above {bound:.3f} "
        f"at {confidence}; tolerance {tolerance} needs {repeats_needed(tolerance, alpha)}"
    )


def judge_repeats(
    mode: str, problems: Sequence[Sequence[str]], tolerance: float, alpha: float = ALPHA
) -> Verdict:
    """One mode's N calls, each given by its problems (none: the call passed). Failed when any
    call failed, with the first failure named; else passed, with the rate excluded and whether
    it judges ``tolerance`` (``judged``)."""
    n = len(problems)
    failed = [i for i, p in enumerate(problems, start=1) if p]
    measures = {
        "mode": mode,
        "calls": n,
        "failed": len(failed),
        "failed_calls": failed,
        "tolerance": tolerance,
        "alpha": alpha,
    }
    if not n:
        return Verdict.failed(f"{mode}: no call made", **measures, judged=False)
    if failed:
        first = failed[0]
        reason = (
            f"{mode}: " + "; ".join(problems[first - 1])
            + f" [call #{first}; {len(failed)} of {n} calls failed, observed rate "
            f"{len(failed) / n:.2f}]"
        )  # fmt: skip
        return Verdict.failed(reason, **measures, excluded_failure_rate=None, judged=True)
    judged, said = power_statement(n, tolerance, alpha)
    return Verdict.passed(
        **measures, excluded_failure_rate=round(excluded_rate(n, alpha), 6), judged=judged,
        statement=said,
    )  # fmt: skip
