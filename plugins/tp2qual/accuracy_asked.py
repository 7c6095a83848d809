"""Whether gate 07 asks a candidate its arithmetic items: only where a drop can be judged from
them, in this run or a later one.

The items judge one thing, a drop in accuracy against a reference (``checks.accuracy``). A
candidate asks them when it has a reference to judge a drop against (``Candidate.reference``:
``[reference] candidate``, else a lane's ``[lane] after``); when a candidate of the catalogue
whose own gate 07 applies names it as its reference (its scored items are what that candidate's
are paired with); or when its ``[gates.agreement] accuracy_record_unjudged`` says so (a run the
user will bring in later as another run's reference). Otherwise none are asked: DeepSeek's TP2
serve, with no TP1 reference and no lane judged against it, would decode 91 items for nothing.

The catalogue is every candidate file loaded, never the ``-k`` selection, so that a run of one
candidate and a run of all decide the same. A candidate whose own gate 07 is not applicable
(``[gates.not_applicable] agreement``: the capacity-protocol lanes) is judged against nothing.
The gate (tests/test_07_agreement.py), ``--plan``'s time (perf/estimate.py) and its gate-07
section (agreement_plan.py) decide by this one rule. Pure: no pytest, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tp2qual.candidate import Candidate

RECORD_UNJUDGED = "accuracy_record_unjudged"  # [gates.agreement]: ask with no drop to judge
NO_DROP_TO_JUDGE = (
    "not asked: no reference to judge a drop against, and no candidate is judged against this "
    f"one ({RECORD_UNJUDGED} asks them anyway)"
)


@dataclass(frozen=True)
class ItemsAsked:
    """The rule's answer for one candidate: asked or not, why, and who is judged against it."""

    asked: bool
    why: str
    referrers: tuple[str, ...] = ()  # the candidates whose gate 07 names this one its reference

    def items(self, settings: Mapping[str, Any]) -> int:
        """The items asked at most: ``accuracy_items``, or none."""
        return int(settings.get("accuracy_items") or 0) if self.asked else 0


def referrers(candidate: Candidate, catalogue: Iterable[Candidate]) -> tuple[str, ...]:
    """The candidates of ``catalogue`` judged against ``candidate`` (their gate 07 applies)."""
    return tuple(
        sorted(
            c.name
            for c in catalogue
            if c.name != candidate.name
            and c.reference == candidate.name
            and not c.not_applicable("agreement")
        )
    )


def items_asked(candidate: Candidate, catalogue: Iterable[Candidate]) -> ItemsAsked:
    """Whether ``candidate`` asks its arithmetic items, ``catalogue`` being every candidate
    loaded (the -k selection or not)."""
    judged_by = referrers(candidate, catalogue)
    if candidate.reference is not None:
        said = f"asked: a drop is judged against its reference {candidate.reference}"
        return ItemsAsked(True, said, judged_by)
    if judged_by:
        return ItemsAsked(True, f"asked: the reference of {', '.join(judged_by)}", judged_by)
    if candidate.gate("agreement").get(RECORD_UNJUDGED):
        said = f"asked: {RECORD_UNJUDGED} = true (recorded, no drop judged in this run)"
        return ItemsAsked(True, said)
    return ItemsAsked(False, NO_DROP_TO_JUDGE)
