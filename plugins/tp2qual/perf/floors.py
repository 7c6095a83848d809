"""Throughput floors: which way each figure is judged, where each floor comes from, the check.

One place for gate 08 (tests/test_08_throughput.py), its re-derivation (evidence/rederive/), the
claim rule there, the per-request time budget (budget.py) and ``--plan``. Pure: settings,
figures and samples in, floors and misses out.

A floor is ``<figure>_<stat>`` (``decode_tok_s_median``, ``ttft_s_p90``; perf/floor_keys.py),
judged in its figure's direction (rates ≥, latencies ≤). It is written in the candidate
(``gates.throughput.floors``, its source the table's ``why``) or derived at run time
(``gates.throughput.derived_floors``) as a fraction of a basis (perf/floor_basis.py): another
candidate's measured figure (its TP1 reference, a lane's baseline), the dated TP1 figure, or the
roofline; where the basis is missing, the rule's ``fallback`` is used, and each floor as judged
says which basis it rests on. A floor that cannot be derived at all raises ``FloorNotDerived``
from ``derive_floors`` (its caller decides whose fault that is).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from tp2qual.floor_table import (
    derivation_problems,
    key_problems,
    refusal,
)
from tp2qual.perf.floor_basis import (
    BASELINE,
    MEASURED,
    ROOFLINE,
    WRITTEN,
    Base,
    Bases,
    base_of,
    basis_names,
    rule_words,
)
from tp2qual.perf.floor_keys import AT_LEAST, AT_MOST, DIRECTIONS, STATS, direction, split_key
from tp2qual.perf.floor_keys import statistic as measured

__all__ = [
    "AT_LEAST",
    "AT_MOST",
    "DIRECTIONS",
    "FLOORS_FILE",
    "NO_FLOOR",
    "STATS",
    "Floor",
    "FloorNotDerived",
    "FloorSet",
    "budget_floor",
    "claim_meets",
    "derivation_problems",
    "derive_floors",
    "floor_plan_lines",
    "judged_floors",
    "key_problems",
    "measured",
    "misses",
    "refusal",
    "split_key",
    "written_floors",
]

FLOORS_FILE = "throughput_floors.json"  # gate 08's floors as judged, beside its samples
NO_FLOOR = "no floor set: the samples are measured and judged against no floor"
BASES = (*MEASURED, BASELINE, ROOFLINE)
# The floor the per-request budget follows, best first (budget.py).
BUDGET_KEYS = ("decode_tok_s_median", "decode_tok_s_mean", "decode_tok_s_min")


class FloorNotDerived(ValueError):
    """One or more floors a candidate asks for could not be derived from this run's evidence."""

    def __init__(self, problems: Sequence[str]):
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


@dataclass(frozen=True)
class Floor:
    """One floor as judged: its key, bound, direction, where the bound came from, and the basis
    it rests on (``written``, or the basis of perf/floor_basis.py with its figure)."""

    key: str
    value: float
    direction: str
    source: str
    basis: str = WRITTEN
    fraction: float | None = None
    of_value: float | None = None  # the basis figure the fraction was taken of
    of_candidate: str = ""  # a measured basis: whose figure, and in which run
    of_run: str = ""

    def met_by(self, measured: float) -> bool:
        return measured >= self.value if self.direction == AT_LEAST else measured <= self.value

    def line(self) -> str:
        return f"{self.key} {self.direction} {self.value:.4g}  ({self.source})"

    def basis_words(self) -> str:
        """``(0.6 x the reference tp1-name's 58.4, run 2026…)``, ``(written)``: what it rests on."""
        named = self.of_candidate and self.of_value is not None
        of = f" {self.of_candidate}'s {self.of_value:.4g}" if named else ""
        run = f", run {self.of_run}" if self.of_run else ""
        share = f"{self.fraction:g} x the " if self.fraction is not None else ""
        return f"({share}{self.basis.replace('_', ' ')}{of}{run})"

    def brief(self) -> str:
        """The floor and its basis without the why: what a timeout report names."""
        return f"{self.key} {self.direction} {self.value:.4g} {self.basis_words()}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def written_floors(settings: Mapping[str, Any]) -> list[Floor]:
    """``gates.throughput.floors``: set by hand; the source is the table's ``why``."""
    why = settings.get("why")
    source = f"written in the candidate: {why}" if why else "written in the candidate, no why"
    return [
        Floor(key, float(value), direction(key), source)
        for key, value in sorted((settings.get("floors") or {}).items())
    ]


def _from_rule(
    key: str, rule: Mapping[str, Any], bases: Bases, settings: Mapping[str, Any]
) -> Floor | str:
    """One rule (or fallback) applied: a floor, or why its basis gives none."""
    why = rule.get("why", "no why")
    if "value" in rule:  # a written fallback
        return Floor(key, float(rule["value"]), direction(key), f"written: {why}")
    base = base_of(key, str(rule["of"]), bases, settings)
    if isinstance(base, str):
        return base
    return _fraction_of(key, float(rule["fraction"]), base, why)


def _fraction_of(key: str, fraction: float, base: Base, why: str) -> Floor:
    return Floor(
        key, fraction * base.value, direction(key), f"{fraction:g} x {base.words}; {why}",
        basis=base.basis, fraction=fraction, of_value=base.value, of_candidate=base.candidate,
        of_run=base.run,
    )  # fmt: skip


def derived_floors(settings: Mapping[str, Any], bases: Bases) -> tuple[list[Floor], list[str]]:
    """``gates.throughput.derived_floors`` from this run's evidence: the floors, and for each one
    that cannot be derived (its basis and its fallback both missing), why."""
    floors, missing = [], []
    for key, rule in sorted((settings.get("derived_floors") or {}).items()):
        first = _from_rule(key, rule, bases, settings)
        fallback = rule.get("fallback")
        if isinstance(first, Floor):
            floors.append(first)
            continue
        second = _from_rule(key, fallback, bases, settings) if fallback else None
        if isinstance(second, Floor):
            floors.append(replace(second, source=f"{second.source} (no {rule['of']}: {first})"))
            continue
        tail = f"; its fallback: {second}" if second else ""
        missing.append(f"derived_floors.{key} (of {rule['of']}): {first}{tail}")
    return floors, missing


@dataclass(frozen=True)
class FloorSet:
    """Every floor gate 08 judges, and the derived ones this run's evidence could not give."""

    floors: tuple[Floor, ...]
    not_derived: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        return [f.line() for f in self.floors] or [NO_FLOOR]

    def bases(self) -> str:
        """Each floor's key and the basis it rests on, in one line (claimed in the finding):
        ``decode_tok_s_median: reference tp1-name (run 2026…)``, ``ttft_s_median: written``."""
        return (
            "; ".join(
                f"{f.key}: {f.basis}" + (f" {f.of_candidate} (run {f.of_run})" if f.of_run else "")
                for f in self.floors
            )
            or "none"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": len(self.floors),
            "bases": self.bases(),
            "floors": [f.as_dict() for f in self.floors],
            "not_derived": list(self.not_derived),
            "note": None if self.floors else NO_FLOOR,
        }


def judged_floors(
    settings: Mapping[str, Any],
    comparison: Mapping[str, Any],
    roofline: Mapping[str, Any],
    measured_bases: Mapping[str, Any] | None = None,
) -> FloorSet:
    """The written floors, then the derived ones (``comparison``: perf/comparison.py
    ``compare_baseline``; ``roofline``: ``roofline_for``; ``measured_bases``: role -> a
    perf/floor_basis.py ``MeasuredBasis`` or why there is none). Never raises for a missing
    basis: ``not_derived`` says it (``--plan``, ``verify``)."""
    bases = Bases(comparison, roofline, measured_bases or {})
    derived, missing = derived_floors(settings, bases)
    return FloorSet((*written_floors(settings), *derived), tuple(missing))


def derive_floors(
    settings: Mapping[str, Any],
    comparison: Mapping[str, Any],
    roofline: Mapping[str, Any],
    measured_bases: Mapping[str, Any] | None = None,
) -> FloorSet:
    """``judged_floors``, raising ``FloorNotDerived`` when any floor asked for has no basis."""
    judged = judged_floors(settings, comparison, roofline, measured_bases)
    if judged.not_derived:
        raise FloorNotDerived(judged.not_derived)
    return judged


def budget_floor(floors: FloorSet) -> Floor | None:
    """The decode-rate floor a request's time budget follows (budget.py), or None."""
    by_key = {f.key: f for f in floors.floors}
    return next((by_key[k] for k in BUDGET_KEYS if k in by_key), None)


def floor_plan_lines(
    settings: Mapping[str, Any], spec: Mapping[str, Any], judged: FloorSet
) -> list[str]:
    """``--plan``: the written floors, each derived floor's rule and fallback in words, then the
    derived floors as they stand before anything is measured (``judged``: with the measured
    bases said to be unmeasured, perf/floor_basis.py ``unmeasured``)."""
    names = basis_names(spec)
    rules = settings.get("derived_floors") or {}
    written = settings.get("floors") or {}
    lines = [f.line() for f in judged.floors if f.basis == WRITTEN and f.key in written]
    for key, rule in sorted(rules.items()):
        lines.append(f"{key} {direction(key)} {rule_words(key, rule, names)}: {rule['why']}")
        if fallback := rule.get("fallback"):
            lines.append(f"  without it: {rule_words(key, fallback, names)}: {fallback['why']}")
    derived = [f.brief() for f in judged.floors if f.key in rules]
    if derived:
        lines.append(f"before any figure is measured: {'; '.join(derived)}")
    return lines or [NO_FLOOR]


def misses(floors: Sequence[Floor], samples: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per floor the samples do not meet, in the floor's own direction, naming the
    basis the floor rests on (so a FAIL's reason says what it was measured against)."""
    lines = []
    for floor in floors:
        value = measured(floor.key, samples)
        if value is None:
            figure = floor.key.rpartition("_")[0]
            lines.append(f"{floor.key}: no measured sample has {figure}")
        elif not floor.met_by(value):
            lines.append(
                f"{floor.key} = {value:.4g}, floor {floor.direction} {floor.value:.4g} "
                f"{floor.basis_words()}"
            )
    return lines


def claim_meets(name: str, value: Any, settings: Mapping[str, Any]) -> bool | None:
    """Whether a throughput claim meets its written floor in the floor's direction; None when
    no written floor names it (a derived floor is judged on ``throughput_floors.json``)."""
    floor = (settings.get("floors") or {}).get(name)
    if floor is None or split_key(name) is None:
        return None
    bound = Floor(name, float(floor), direction(name), "written")
    return isinstance(value, int | float) and bound.met_by(float(value))
