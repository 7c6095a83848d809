"""Two greedy decodes of one prompt, compared token by token, and a decode's own greedy rule.

The walk is vLLM's ``check_logprobs_close`` (``tests/models/utils.py``): along the common prefix
the contexts are the same; at the first differing token each side's token must be in the other
side's top N (a near tie, as a TP or kernel change legitimately makes). Added here, for what that
rule lets through:

- the chosen tokens' logprobs over the common prefix differ by at most a tolerance (from token
  0: a prompt that diverges at once still reports its first position);
- at the divergence, how far each side's token is below its own top choice (the *gap*): a near
  tie is a small gap, not just membership of a top-5 list;
- the ends: one side stopping where the other goes on, or a different finish reason, is a
  difference (an early EOS or a truncation);
- greedy means argmax: every chosen token is the top of its own reported distribution within
  ``epsilon`` (a serve that takes its second choice keeps its logprobs and fails only this).

Pure: rows in (``rows.Row``), verdicts out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.agreement.rows import Row
from tp2qual.checks.verdict import Verdict


@dataclass(frozen=True)
class Closeness:
    top_n: int
    max_abs_delta_logprob: float
    max_divergence_gap: float


@dataclass(frozen=True)
class Decode:
    """One prompt's greedy answer: its rows and how it ended."""

    rows: Sequence[Row]
    finish_reason: str | None


def _rank(row: Row, n: int) -> list[str]:
    return [pair[0] for pair in row["top"][:n]]


def _gap(row: Row, token: str) -> float | None:
    """How far ``token`` is below the row's own top choice (None: not in its list)."""
    listed = dict((pair[0], pair[1]) for pair in row["top"])
    if token not in listed or not row["top"]:
        return None
    return max(0.0, row["top"][0][1] - listed[token])


def compare(own: Decode, ref: Decode, rule: Closeness) -> Verdict:
    """One prompt: the common prefix's largest |Δ logprob|, the first divergence judged by the
    closeness rule and its gap, and the ends."""
    common, deltas = 0, []
    for a, b in zip(own.rows, ref.rows, strict=False):
        if a["token"] != b["token"]:
            break
        deltas.append(abs(a["logprob"] - b["logprob"]))
        common += 1
    same_end = len(own.rows) == len(ref.rows) and own.finish_reason == ref.finish_reason
    measures: dict[str, Any] = {
        "own_tokens": len(own.rows),
        "ref_tokens": len(ref.rows),
        "common_prefix": common,
        "max_abs_delta_logprob": round(max(deltas, default=0.0), 6),
        "compared_positions": len(deltas),
        "exact": common == len(own.rows) == len(ref.rows) and same_end,
        "own_finish": own.finish_reason,
        "ref_finish": ref.finish_reason,
        "divergence": None,
    }
    problems = []
    if common < min(len(own.rows), len(ref.rows)):
        problems += _divergence(own.rows[common], ref.rows[common], common, rule, measures)
    elif not same_end:
        problems.append(_ends(own, ref, common))
    if measures["max_abs_delta_logprob"] > rule.max_abs_delta_logprob:
        problems.append(
            f"|Δ logprob| {measures['max_abs_delta_logprob']:.3f} over the common prefix "
            f"(> {rule.max_abs_delta_logprob})"
        )
    if problems:
        return Verdict.failed("; ".join(problems), **measures)
    return Verdict.passed(**measures)


def _divergence(a: Row, b: Row, at: int, rule: Closeness, measures: dict[str, Any]) -> list[str]:
    own_gap, ref_gap = _gap(a, b["token"]), _gap(b, a["token"])
    a_in_b, b_in_a = a["token"] in _rank(b, rule.top_n), b["token"] in _rank(a, rule.top_n)
    measures["divergence"] = {
        "position": at,
        "own_token": a["token"],
        "own_logprob": a["logprob"],
        "ref_token": b["token"],
        "ref_logprob": b["logprob"],
        "own_in_ref_top": a_in_b,
        "ref_in_own_top": b_in_a,
        "own_gap": None if own_gap is None else round(own_gap, 6),  # the ref's token, below ours
        "ref_gap": None if ref_gap is None else round(ref_gap, 6),
    }
    where = f"diverges at token {at}: {a['token']!r} ({a['logprob']:.3f}) against the reference's"
    where += f" {b['token']!r} ({b['logprob']:.3f})"
    if not (a_in_b and b_in_a):
        return [
            f"{where}, {'' if a_in_b else 'not '}in the reference's top {rule.top_n}, the "
            f"reference's {'' if b_in_a else 'not '}in its own top {rule.top_n}"
        ]
    gap = max(g for g in (own_gap, ref_gap) if g is not None)
    measures["divergence_gap"] = round(gap, 6)
    if gap > rule.max_divergence_gap:
        return [f"{where}: no near tie, {gap:.3f} nat apart (> {rule.max_divergence_gap})"]
    return []


def _ends(own: Decode, ref: Decode, common: int) -> str:
    if len(own.rows) < len(ref.rows):
        return (
            f"stops after token {common} ({own.finish_reason}) where the reference goes on to "
            f"{len(ref.rows)} tokens ({ref.finish_reason})"
        )
    if len(own.rows) > len(ref.rows):
        return (
            f"goes on to {len(own.rows)} tokens ({own.finish_reason}) where the reference stops "
            f"after token {common} ({ref.finish_reason})"
        )
    return f"the same tokens end {own.finish_reason!r} here, {ref.finish_reason!r} in the reference"


def not_argmax(rows: Sequence[Row], epsilon: float) -> list[dict[str, Any]]:
    """The positions whose chosen token is below its own row's top choice by more than
    ``epsilon`` nat (a row without a top list is not judged)."""
    found = []
    for i, row in enumerate(rows):
        if row["top"] and row["top"][0][1] - row["logprob"] > epsilon:
            found.append(
                {"position": i, "token": row["token"], "logprob": row["logprob"],
                 "top_token": row["top"][0][0], "top_logprob": row["top"][0][1]}
            )  # fmt: skip
    return found


def decode_of(line: Mapping[str, Any]) -> Decode:
    return Decode(line["tokens"], line.get("finish_reason"))
