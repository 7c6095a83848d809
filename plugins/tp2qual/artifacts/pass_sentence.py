"""One sentence for a PASS: what gate 07 judged against whom, what it did not judge and why, and
who the reference is, or that there is none.

The finding (``pass_sentence`` in ``finding.json``), the terminal line, the report's overview
and verify's summary all print the sentence ``pass_sentence`` builds, so a PASS reads the same
in each place. "agrees with its reference" is said only where gate 07 judged a reference (its
``agrees_with_reference`` claim is true); a part gate 07 could not judge is named with its own
words (the gate's skipped checks: too few aligned positions, no power, an engine that cannot
reread); a named reference that FAILed in this run is said as such, never as "not applicable".

``pass_sentence`` is pure: a finding's verdict, candidate spec and gate 07 as recorded (a
``GateResult``), and the named reference's verdict in this run, which ``reference_verdict``
reads from the run folder (the one file it opens). ``Finding.pass_sentence`` and
``CandidateRecord`` call it; it imports neither, so the finding stands on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from tp2qual.artifacts.layout import FINDING
from tp2qual.checks.agreement.evaluate import PARTS

PASS, FAIL, ERROR = "PASS", "FAIL", "ERROR"  # a finding's verdicts (artifacts/finding.py)
PASSED, NOT_APPLICABLE = "passed", "not_applicable"  # a gate's outcomes


class Gate(Protocol):
    """A gate as recorded (``artifacts.finding.GateResult``)."""

    outcome: str
    reason: str
    skipped: dict[str, str]
    claims: list[Any]  # each with .name and .value


AGAINST = PARTS["reference"]  # the skipped check that says why no reference was judged
# The parts gate 07 judges, each with the claim that shows it ran (in the order the gate runs
# them); the reference parts are said with the reference.
OWN_PARTS = (
    ("greedy is argmax", "greedy_not_argmax"),
    (PARTS["self"], "self_judgement"),
    (PARTS["near_bound"], "near_bound_judgement"),
    ("cached prefix", "cached_prefix_agrees"),
)
REFERENCE_PARTS = (("closeness walk", "agrees_with_reference"), (PARTS["tf"], "tf_judgement"))
SHORT = 160  # a reason is cut here: the sentence stays one line


def pass_sentence(verdict: str, spec: Mapping[str, Any], agreement: Gate | None,
                  reference_verdict: str | None = None) -> str | None:  # fmt: skip
    """The sentence for a PASS, or None for another verdict. ``agreement``: gate 07 as
    recorded (None: not recorded); ``reference_verdict``: the named reference's own verdict in
    this run, where it has one."""
    if verdict != PASS:
        return None
    said = agreement_sentence(spec, agreement, reference_verdict)
    return f"PASS: every gate passed or did not apply; {said}"


def agreement_sentence(spec: Mapping[str, Any], result: Gate | None,
                       reference_verdict: str | None = None) -> str:  # fmt: skip
    """Gate 07 in one sentence: against whom, what was judged, what was not and why."""
    named = reference_named(spec)
    if result is None or result.outcome not in (PASSED, NOT_APPLICABLE):
        return "gate 07 " + (result.outcome.replace("_", " ") if result else "not recorded")
    if result.outcome == NOT_APPLICABLE:
        why = _short(_after(result.reason, "not applicable:"))
        said = f"gate 07 not applicable ({why})" if why else "gate 07 not applicable"
        if named or "reference" not in why:  # who the reference is, unless the reason says
            said += f"; {_no_reference(spec, named, reference_verdict, '')}"
        return said
    claims = {c.name: c.value for c in result.claims}
    skipped = {p: w for p, w in result.skipped.items() if p in PARTS.values()}
    judged = [part for part, claim in OWN_PARTS if claim in claims and part not in skipped]
    parts = [_against(claims, spec, named, reference_verdict, skipped.get(AGAINST, ""))]
    if claims.get("agrees_with_reference") is True:
        judged = [p for p, c in REFERENCE_PARTS if c in claims and p not in skipped] + judged
    if claims.get("accuracy_judged") is True:
        judged.append("accuracy")
    parts.append(f"judged: {', '.join(judged)}" if judged else "nothing judged")
    accuracy = claims.get("accuracy_judgement")  # where the skipped checks do not say it
    if accuracy and claims.get("accuracy_judged") is not True and PARTS["accuracy"] not in skipped:
        skipped[PARTS["accuracy"]] = str(accuracy)
    order = list(PARTS.values())  # in the order the gate judges them, whatever the file's
    unjudged = [
        f"{part} ({_short(_after(skipped[part], 'not judged:'))})"
        for part in sorted(skipped, key=order.index)
        if part != AGAINST
    ]
    if unjudged:
        parts.append(f"not judged: {'; '.join(unjudged)}")
    return "gate 07 " + "; ".join(parts)


def _against(claims: Mapping[str, Any], spec: Mapping[str, Any], named: str,
             reference_verdict: str | None, why_not: str) -> str:  # fmt: skip
    if claims.get("agrees_with_reference") is True:
        who = claims.get("reference_candidate") or named or "its reference"
        source = claims.get("reference_source")
        run = "this run" if source == "this run" else f"run {claims.get('reference_run')}"
        said = f"agrees with its reference {who} ({run})"
        if reference_verdict and reference_verdict != PASS and source != "this run":
            said += f", which {_past(reference_verdict)} in this run"  # verify names the rule
        return said
    return _no_reference(spec, named, reference_verdict, why_not)


def _no_reference(spec: Mapping[str, Any], named: str, reference_verdict: str | None,
                  why_not: str) -> str:  # fmt: skip
    """No reference judged: the one named and why it was not, or why none is named."""
    if named and reference_verdict and reference_verdict != PASS:
        return f"reference {named} {_past(reference_verdict)} in this run: not held against it"
    if named:
        why = _short(_after(why_not, "not judged:")) or "not judged against"
        return f"reference {named}: {why}"
    reference = spec.get("reference")
    written = reference.get("not_applicable") if isinstance(reference, Mapping) else None
    why = " ".join(str(written or "").split())
    return f"no reference ({_short(_first_sentence(why)) or 'none named'})"


def reference_named(spec: Mapping[str, Any]) -> str:
    """``[reference] candidate``, else a lane's baseline (as ``Candidate.reference``)."""
    reference, lane = spec.get("reference"), spec.get("lane")
    named = reference.get("candidate") if isinstance(reference, Mapping) else None
    after = lane.get("after") if isinstance(lane, Mapping) else None
    return str(named or after or "")


def reference_verdict(run_dir: Path, spec: Mapping[str, Any]) -> str | None:
    """The named reference's verdict as its finding in ``run_dir`` states it (None: none named,
    not run here, or unreadable)."""
    named = reference_named(spec)
    if not named:
        return None
    try:
        data = json.loads((run_dir / named / FINDING).read_text())
    except (OSError, ValueError):
        return None
    verdict = data.get("verdict") if isinstance(data, Mapping) else None
    return str(verdict) if verdict else None


def _past(verdict: str) -> str:
    return {FAIL: "FAILED", ERROR: "ended in a suite ERROR"}.get(verdict, f"is {verdict}")


def _after(text: str, prefix: str) -> str:
    text = " ".join(str(text).split())
    for head in (prefix, prefix.replace(" ", "_")):
        if text.startswith(head):
            return text[len(head) :].strip()
    return text


def _first_sentence(text: str) -> str:
    """The headline of a written reason ("No TP1 serve of this model fits one GPU: 304 B …")."""
    return text.partition(". ")[0].partition(": ")[0]


def _short(text: str) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= SHORT else text[: SHORT - 1] + "…"
