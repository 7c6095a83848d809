"""Agreement with a reference serve: greedy continuations compared token by token.

The rule is vLLM's ``check_logprobs_close`` (``tests/models/utils.py``): walk both greedy
outputs; at the first token where they differ, each side's token must be among the other side's
top-N candidates at that position (a near-tie, as a TP or kernel change legitimately makes),
and nothing after it is compared (the contexts differ from there on). Added here: over the
common prefix, where both sides saw the same context, the chosen tokens' logprobs may differ by
at most a tolerance (a fluent serve with a broken kernel keeps the argmax but moves the
distribution; vllm #52938 was found only by reading logprobs).

Pure: records in, verdicts and claims out. A *record* is one prompt's line of a transcript
(``agreement_transcript.jsonl``): ``{"kind": "transcript" | "reference", "id", "tokens":
[{"token", "logprob", "top": [[token, logprob], ...]}], ...}``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tp2qual.checks.accuracy import judge_accuracy
from tp2qual.checks.verdict import Verdict

OWN, REFERENCE, COMPARISON, SUMMARY = "transcript", "reference", "comparison", "summary"
ACCURACY, REFERENCE_ACCURACY = "accuracy", "reference_accuracy"  # one scored item per line


@dataclass(frozen=True)
class Tolerances:
    """``[gates.agreement]``'s tolerances (defaults: ``candidate.GATE_DEFAULTS``)."""

    top_n: int
    max_abs_delta_logprob: float
    min_exact_share: float

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> Tolerances:
        return cls(
            top_n=int(settings["top_n"]),
            max_abs_delta_logprob=float(settings["max_abs_delta_logprob"]),
            min_exact_share=float(settings["min_exact_share"]),
        )


def tokens_from_logprobs(logprobs: Any) -> list[dict[str, Any]]:
    """The OpenAI chat ``choices[0].logprobs`` as transcript tokens; [] when absent or malformed
    (the gate says so: an answer without logprobs cannot be judged by this rule)."""
    content = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(content, list):
        return []
    tokens = []
    for entry in content:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("logprob"), int | float):
            return []
        top = [
            [str(t.get("token")), float(t["logprob"])]
            for t in entry.get("top_logprobs") or []
            if isinstance(t, Mapping) and isinstance(t.get("logprob"), int | float)
        ]
        tokens.append({"token": str(entry.get("token")), "logprob": entry["logprob"], "top": top})
    return tokens


def _top(token: Mapping[str, Any], n: int) -> set[str]:
    ranked = sorted(token["top"], key=lambda pair: -pair[1])
    return {pair[0] for pair in ranked[:n]}


def compare(
    own: Sequence[Mapping[str, Any]], ref: Sequence[Mapping[str, Any]], tol: Tolerances
) -> Verdict:
    """One prompt: the first divergence by the closeness rule, and the largest |Δ logprob| of
    the chosen token over the common prefix. One side stopping earlier is no divergence (as in
    vLLM: the end-of-sequence token carries no logprob to compare)."""
    common = 0
    deltas = [0.0]
    for a, b in zip(own, ref, strict=False):
        if a["token"] != b["token"]:
            break
        deltas.append(abs(float(a["logprob"]) - float(b["logprob"])))
        common += 1
    measures: dict[str, Any] = {
        "own_tokens": len(own),
        "ref_tokens": len(ref),
        "common_prefix": common,
        "max_abs_delta_logprob": round(max(deltas), 6),
        "exact": common == len(own) == len(ref),
        "divergence": None,
    }
    problems = []
    if common < min(len(own), len(ref)):
        a, b = own[common], ref[common]
        a_in_b, b_in_a = a["token"] in _top(b, tol.top_n), b["token"] in _top(a, tol.top_n)
        measures["divergence"] = {
            "position": common,
            "own_token": a["token"],
            "own_logprob": a["logprob"],
            "ref_token": b["token"],
            "ref_logprob": b["logprob"],
            "own_in_ref_top": a_in_b,
            "ref_in_own_top": b_in_a,
        }
        if not (a_in_b and b_in_a):
            problems.append(
                f"diverges at token {common}: {a['token']!r} ({a['logprob']:.3f}) against the "
                f"reference's {b['token']!r} ({b['logprob']:.3f}), "
                f"{'not ' if not a_in_b else ''}in the reference's top {tol.top_n}, reference's "
                f"{'not ' if not b_in_a else ''}in its own top {tol.top_n}"
            )
    if measures["max_abs_delta_logprob"] > tol.max_abs_delta_logprob:
        problems.append(
            f"|Δ logprob| {measures['max_abs_delta_logprob']:.3f} over the common prefix "
            f"(> {tol.max_abs_delta_logprob})"
        )
    return (
        Verdict.failed("; ".join(problems), **measures) if problems else Verdict.passed(**measures)
    )


def judge(
    own: Sequence[Mapping[str, Any]], ref: Sequence[Mapping[str, Any]], tol: Tolerances
) -> tuple[list[dict[str, Any]], Verdict]:
    """Every prompt compared (per-prompt lines), and the overall verdict: every prompt agrees by
    the rule and the share that agree exactly reaches ``min_exact_share``."""
    by_id = {r["id"]: r for r in ref}
    lines, problems = [], []
    for record in own:
        other = by_id.get(record["id"])
        if other is None:
            one = Verdict.failed("the reference transcript has no such prompt")
        else:
            one = compare(record["tokens"], other["tokens"], tol)
        lines.append(
            {
                "kind": COMPARISON,
                "id": record["id"],
                "agrees": one.ok,
                "reason": one.reason,
                **one.measures,
            }
        )
        if not one.ok:
            problems.append(f"{record['id']}: {one.reason}")
    exact = sum(bool(line.get("exact")) for line in lines)
    share = exact / len(lines) if lines else 0.0
    measures = {
        "prompts": len(lines),
        "exact": exact,
        "exact_share": round(share, 6),
        "max_abs_delta_logprob": max(
            (line.get("max_abs_delta_logprob", 0.0) for line in lines), default=0.0
        ),
    }
    if not lines:
        problems.append("no prompts to compare")
    elif share < tol.min_exact_share:
        problems.append(f"{exact}/{len(lines)} prompts agree exactly (< {tol.min_exact_share:.0%})")
    verdict = (
        Verdict.failed("; ".join(problems), **measures) if problems else Verdict.passed(**measures)
    )
    return lines, verdict


def rederive(records: Iterable[Mapping[str, Any]], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The gate's claims, from ``agreement_transcript.jsonl``'s records and the candidate's
    ``[gates.agreement]`` settings alone (what ``verify`` re-runs). Without reference lines,
    only the transcript's own claims."""
    records = list(records)
    own = [r for r in records if r.get("kind") == OWN]
    ref = [r for r in records if r.get("kind") == REFERENCE]
    claims: dict[str, Any] = {
        "agreement_prompts": len(own),
        "prompt_set_sha256": own[0].get("prompt_set_sha256") if own else None,
    }
    claims |= accuracy_claims(records, settings, with_reference=bool(ref))
    if not ref:
        return claims
    _, verdict = judge(own, ref, Tolerances.from_mapping(settings))
    return claims | {
        "reference_candidate": ref[0].get("candidate"),
        "reference_run": ref[0].get("run"),
        "reference_source": ref[0].get("source"),
        "agrees_with_reference": verdict.ok,
        "exact_share": verdict.measures["exact_share"],
        "max_abs_delta_logprob": verdict.measures["max_abs_delta_logprob"],
    }


def accuracy_verdict(
    records: Sequence[Mapping[str, Any]], settings: Mapping[str, Any], *, with_reference: bool
) -> Verdict | None:
    """Accuracy, its Wilson interval and (against a reference) the paired drop test; None when
    no item was asked (``accuracy_items = 0``)."""
    scored = [r for r in records if r.get("kind") == ACCURACY]
    if not scored:
        return None
    own = {r["id"]: bool(r["correct"]) for r in scored}
    same_items = scored[0].get("items_sha256")  # paired only on the very same item bytes
    ref = {
        r["id"]: bool(r["correct"])
        for r in records
        if r.get("kind") == REFERENCE_ACCURACY and r.get("items_sha256") == same_items
    }
    return judge_accuracy(own, ref if with_reference else None, settings["accuracy_alpha"])


def accuracy_claims(
    records: Sequence[Mapping[str, Any]], settings: Mapping[str, Any], *, with_reference: bool
) -> dict[str, Any]:
    verdict = accuracy_verdict(records, settings, with_reference=with_reference)
    if verdict is None:
        return {}
    m = verdict.measures
    claims = {
        "accuracy_items": m["items"],
        "accuracy": m["accuracy"],
        "accuracy_wilson_low": m["wilson_low"],
        "accuracy_wilson_high": m["wilson_high"],
        "accuracy_holds": verdict.ok,
    }
    if "p_drop" in m:
        claims |= {"reference_accuracy": m["reference_accuracy"], "accuracy_p_drop": m["p_drop"]}
    return claims
