"""Gate 07's judgement from its transcript's lines alone: what the gate decides and what
``verify`` decides again.

The transcript (``agreement_transcript.jsonl``) holds, per shipped prompt, this serve's greedy
decode (``transcript``), its reread of prompt plus answer (``reread`` ``of: self``), a second
decode of the same prompt once its prefix is cached (``warm``), and against a reference its
reread of the reference's prompt plus answer (``reread`` ``of: forced``) beside the reference's
own lines (``reference``); then the scored accuracy items (``accuracy``, ``reference_accuracy``),
or, where no drop can be judged from them, one ``accuracy_not_asked`` line saying why none was
asked (``tp2qual.accuracy_asked``).
The judgement has these parts, each with its own claims:

- greedy is argmax on every decode (``greedy_not_argmax``: the positions that are not);
- self-consistency (``self_*``) on the shipped prompts, and apart on the prompt near the bound
  (``near_bound_*``), where a KV-cache fault shows: there the decode is held against a warm
  decode of the same prompt (a reread in runs before issue 35; ``near_bound.py`` says why);
- a cached prefix decodes as the cold one did (``cached_prefix_agrees``);
- against the reference: the closeness walk with its gap and ends (``agrees_with_reference``,
  ``exact_share``, ``max_abs_delta_logprob``, ``max_divergence_gap``) and teacher forcing
  (``tf_*``);
- accuracy with its power (``checks.accuracy.judge_accuracy``); not asked: not judged, and why.

A part that cannot judge (no reference, too few aligned positions, no power) says so in
``agreement_not_judged`` / ``accuracy_judgement``; it never reads as holding. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tp2qual.checks.accuracy import judge_accuracy
from tp2qual.checks.agreement import closeness, scoring
from tp2qual.checks.agreement.kinds import (
    ACCURACY,
    NEAR_BOUND,
    NOT_ASKED,
    OWN,
    REFERENCE,
    REFERENCE_ACCURACY,
    REREAD,
    STOPPED,
    WARM,
)
from tp2qual.checks.agreement.rows import aligned
from tp2qual.checks.verdict import Verdict


@dataclass
class Evaluation:
    claims: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # each fails the gate
    not_judged: dict[str, str] = field(default_factory=dict)  # part -> why it could not judge

    def part(self, prefix: str, verdict: Verdict, **figures: Any) -> None:
        self.claims |= {
            f"{prefix}_{k}": v for k, v in figures.items() if k not in scoring.UNCLAIMED
        }
        self.claims[f"{prefix}_judgement"] = verdict.measures.get("judgement")
        if not verdict.ok:
            self.problems.append(verdict.reason)
        elif not verdict.measures.get("judged", True):
            self.not_judged[PARTS[prefix]] = verdict.measures["judgement"]


PARTS = {"self": "self-consistency", "near_bound": "self-consistency near the bound",
         "tf": "teacher forcing", "reference": "agreement with a reference",
         "accuracy": "accuracy"}  # fmt: skip


def rule_of(settings: Mapping[str, Any]) -> closeness.Closeness:
    return closeness.Closeness(
        int(settings["top_n"]),
        float(settings["max_abs_delta_logprob"]),
        float(settings["max_divergence_gap"]),
    )


def evaluate(records: Iterable[Mapping[str, Any]], settings: Mapping[str, Any]) -> Evaluation:
    lines = [r for r in records if isinstance(r, Mapping)]
    own = {r["id"]: r for r in lines if r.get("kind") == OWN}
    ref = {r["id"]: r for r in lines if r.get("kind") == REFERENCE}
    rereads = {(r["of"], r["id"]): r for r in lines if r.get("kind") == REREAD}
    out = Evaluation()
    shipped = [i for i in own if i != NEAR_BOUND]
    out.claims |= {
        "agreement_prompts": len(shipped),
        "prompt_set_sha256": next((own[i].get("prompt_set_sha256") for i in shipped), None),
    }
    if NEAR_BOUND in own:
        out.claims["near_bound_prompt_tokens"] = own[NEAR_BOUND].get("prompt_tokens")
    _greedy(out, [*own.values(), *(r for r in lines if r.get("kind") == WARM)], settings)
    warm = [r for r in lines if r.get("kind") == WARM]
    _self(out, own, rereads, settings, {r["id"]: r for r in warm if r["id"] == NEAR_BOUND})
    _warm(out, own, warm, settings)
    if ref:
        _against(out, {i: own[i] for i in shipped}, ref, rereads, settings)
    else:
        out.not_judged[PARTS["reference"]] = "not applicable: no reference transcript"
    _accuracy(out, lines, settings, with_reference=bool(ref))
    out.claims["agreement_judged"] = not out.problems and bool(ref)
    out.claims["agreement_not_judged"] = (
        "; ".join(f"{k}: {v}" for k, v in out.not_judged.items() if k != "accuracy") or None
    )
    return out


def _greedy(out: Evaluation, decodes: list[Mapping[str, Any]], settings: Mapping[str, Any]) -> None:
    epsilon = float(settings["argmax_epsilon"])
    found, positions = [], 0
    for line in decodes:
        positions += len(line["tokens"])
        found += [{"id": line["id"], **f} for f in closeness.not_argmax(line["tokens"], epsilon)]
    out.claims["greedy_positions"] = positions
    out.claims["greedy_not_argmax"] = len(found)
    if found:
        first = found[0]
        out.problems.append(
            f"greedy is not argmax at {len(found)} of {positions} positions: first in "
            f"{first['id']} at token {first['position']}, {first['token']!r} "
            f"({first['logprob']:.3f}) chosen over its own top {first['top_token']!r} "
            f"({first['top_logprob']:.3f}), more than {epsilon} nat"
        )


def _pairs(decoded: Mapping[str, Any], reread: Mapping[str, Any] | None) -> list[Any]:
    return aligned(decoded["tokens"], reread["tokens"]) if reread else []


def _self(out: Evaluation, own: Mapping[str, Any], rereads: Mapping[Any, Any],
          settings: Mapping[str, Any], warm: Mapping[str, Any]) -> None:  # fmt: skip
    """Each decode against its reread; near the bound, against its warm decode where no
    reread was asked (checks/agreement/near_bound.py: an echo there can exhaust the serve)."""
    bounds = scoring.Bounds.from_settings(settings, "self")
    groups = {"self": [i for i in own if i != NEAR_BOUND], "near_bound": [NEAR_BOUND]}
    for prefix, ids in groups.items():
        ids = [i for i in ids if i in own]
        if not ids:
            continue
        against = {i: rereads.get(("self", i)) or warm.get(i) for i in ids}
        pairs = [p for i in ids for p in _pairs(own[i], against[i])]
        found = scoring.figures(pairs, sum(len(own[i]["tokens"]) for i in ids))
        warmed = any(rereads.get(("self", i)) is None and i in warm for i in ids)
        how = "its warm decode" if warmed else "its reread"
        what = "self-consistency" if prefix == "self" else "self-consistency near the bound"
        out.part(prefix, scoring.judge(found, bounds, f"{what} (decode against {how})"),
                 **found)  # fmt: skip


def _warm(out: Evaluation, own: Mapping[str, Any], warm: list[Mapping[str, Any]],
          settings: Mapping[str, Any]) -> None:  # fmt: skip
    """The warm decode against the cold one, by the closeness walk with its own bound on the
    common prefix (``warm_max_abs_delta_logprob``): a cached prefix is another code path of
    the same serve, and a prefix-cache fault shows as a gap only there."""
    if not warm:
        return
    own_bound = "warm_max_abs_delta_logprob" in settings
    # A run recorded before the setting existed was judged at the self p99 and claimed no
    # figure: verify judges it as then.
    bound = settings["warm_max_abs_delta_logprob" if own_bound else "self_max_p99_abs_delta"]
    cold = rule_of(settings)
    rule = closeness.Closeness(cold.top_n, float(bound), cold.max_divergence_gap)
    problems, largest = [], 0.0
    for line in warm:
        verdict = closeness.compare(
            closeness.decode_of(line), closeness.decode_of(own[line["id"]]), rule
        )
        largest = max(largest, float(verdict.measures["max_abs_delta_logprob"]))
        if not verdict.ok:
            problems.append(f"{line['id']}: {verdict.reason}")
    out.claims["cached_prefix_agrees"] = not problems
    if own_bound:
        out.claims["cached_prefix_max_abs_delta"] = largest
    if problems:
        out.problems.append(
            "with its prefix cached, the decode differs from the cold one: " + "; ".join(problems)
        )


def _against(out: Evaluation, own: Mapping[str, Any], ref: Mapping[str, Any],
             rereads: Mapping[Any, Any], settings: Mapping[str, Any]) -> None:  # fmt: skip
    rule, problems, exact, gaps, deltas = rule_of(settings), [], 0, [], []
    for pid, line in own.items():
        other = ref.get(pid)
        if other is None:
            problems.append(f"{pid}: the reference transcript has no such prompt")
            continue
        one = closeness.compare(closeness.decode_of(line), closeness.decode_of(other), rule)
        exact += bool(one.measures["exact"])
        deltas.append(one.measures["max_abs_delta_logprob"])
        gaps += [one.measures["divergence_gap"]] if "divergence_gap" in one.measures else []
        problems += [] if one.ok else [f"{pid}: {one.reason}"]
    share = exact / len(own) if own else 0.0
    if share < float(settings["min_exact_share"]):
        wanted = float(settings["min_exact_share"])
        problems.append(f"{exact}/{len(own)} prompts agree exactly (< {wanted:.0%})")
    first = next(iter(ref.values()))
    out.claims |= {
        "reference_candidate": first.get("candidate"),
        "reference_run": first.get("run"),
        "reference_source": first.get("source"),
        "agrees_with_reference": not problems,
        "exact_share": round(share, 6),
        "max_abs_delta_logprob": max(deltas, default=0.0),
        "max_divergence_gap": max(gaps, default=0.0),
    }
    out.problems += [f"against the reference: {p}" for p in problems]
    pairs = [p for pid in own if pid in ref for p in _pairs(ref[pid], rereads.get(("forced", pid)))]
    found = scoring.figures(pairs, sum(len(ref[pid]["tokens"]) for pid in own if pid in ref))
    bounds = scoring.Bounds.from_settings(settings, "tf")
    verdict = scoring.judge(found, bounds, "teacher-forced on the reference's answers")
    out.part("tf", verdict, **found)


_AS_IS = ("accuracy", "reference_accuracy")  # the other measures are claimed as accuracy_<name>


def _accuracy(out: Evaluation, lines: list[Mapping[str, Any]], settings: Mapping[str, Any], *,
              with_reference: bool) -> None:  # fmt: skip
    scored = [r for r in lines if r.get("kind") == ACCURACY]
    not_asked = next((r for r in lines if r.get("kind") == NOT_ASKED), None)
    if not_asked is not None:
        _not_asked(out, not_asked, lines, settings, with_reference=with_reference)
        return
    if not scored:
        return
    digest = scored[0].get("items_sha256")  # paired only on the very same item bytes
    own = {r["id"]: r.get("correct") for r in scored}
    theirs = {
        r["id"]: r.get("correct")
        for r in lines
        if r.get("kind") == REFERENCE_ACCURACY and r.get("items_sha256") == digest
    }
    stopped = next((r for r in lines if r.get("kind") == STOPPED), None)
    verdict = judge_accuracy(
        own, theirs if with_reference else None,
        alpha=float(settings["accuracy_alpha"]), max_drop=float(settings["accuracy_max_drop"]),
        planned=int(settings["accuracy_items"]) if stopped else None,
        # A run recorded before the setting existed was sized with no churn: verify judges as then.
        gain_rate=float(settings.get("accuracy_gain_rate", 0.0)),
    )  # fmt: skip
    m = verdict.measures
    out.claims |= {k if k in _AS_IS else f"accuracy_{k}": v for k, v in m.items()}
    out.claims["accuracy_stopped"] = stopped.get("why") if stopped else None
    if not verdict.ok:
        out.problems.append(verdict.reason)
    elif not m.get("judged"):
        out.not_judged[PARTS["accuracy"]] = str(m.get("judgement"))


def _not_asked(out: Evaluation, line: Mapping[str, Any], lines: list[Mapping[str, Any]],
               settings: Mapping[str, Any], *, with_reference: bool) -> None:  # fmt: skip
    """No item asked (``tp2qual.accuracy_asked``): its why is the accuracy part's, never a
    judgement. A transcript that says so and yet holds an item or a stop, a reference's lines,
    or settings that ask the items anyway contradicts itself: judged a problem, never passed."""
    why = " ".join(str(line.get("why") or "not asked").split())
    out.claims |= {"accuracy_judged": False, "accuracy_judgement": why}
    asked = sum(r.get("kind") in (ACCURACY, STOPPED) for r in lines)
    contradicted = [
        f"{asked} item or stop line(s)" if asked else "",
        "a reference transcript, against which they are always asked" if with_reference else "",
        "accuracy_record_unjudged = true" if settings.get("accuracy_record_unjudged") else "",
    ]
    if said := "; ".join(c for c in contradicted if c):
        out.problems.append(f"the transcript says the accuracy items were not asked, yet: {said}")
    else:
        out.not_judged[PARTS["accuracy"]] = why
