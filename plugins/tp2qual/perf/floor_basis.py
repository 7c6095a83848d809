"""What a derived floor is a fraction of, and the words that say so. Pure.

A derived floor (``gates.throughput.derived_floors.KEY = { of, fraction, why, fallback }``) is a
fraction of one *basis*:

- ``reference``: the same figure as measured by another candidate — its ``[reference]
  candidate`` (a lane without one: its baseline) — by gate 08 of this very suite, taken from
  its PASS in this run, else from the newest earlier dated run that holds one (never the
  ``latest`` link). A TP2 serve's decode floor against its TP1 serve's measured rate.
- ``lane_baseline``: likewise, of the candidate its ``[lane] after`` names: a speculative lane
  against the baseline it exists to be faster than.
- ``baseline``: the dated TP1 figure of ``[baseline]``, when its definition is the suite's
  (perf/comparison.py).
- ``roofline``: the single-stream decode roofline (perf/roofline.py), decode rate only.

A measured basis counts only when it was measured the same way (the same prompt length, output
length and fixed output): another shape of request is another figure. Where the basis is
missing, the rule's ``fallback`` (another basis, or a written ``value``) is used and said so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# The bases and who a file names for each are the file's words (tp2qual/floor_table.py).
from tp2qual.floor_table import BASELINE as BASELINE
from tp2qual.floor_table import LANE_BASELINE as LANE_BASELINE
from tp2qual.floor_table import MEASURED as MEASURED
from tp2qual.floor_table import REFERENCE as REFERENCE
from tp2qual.floor_table import ROOFLINE as ROOFLINE
from tp2qual.floor_table import ROOFLINE_FIGURE as ROOFLINE_FIGURE
from tp2qual.floor_table import WRITTEN as WRITTEN
from tp2qual.floor_table import basis_names as basis_names
from tp2qual.perf.floor_keys import statistic

# Gate 08 settings that define what a sample measures: two candidates' samples are the same
# figure only when these agree (the number of samples and the warm-up do not change it).
SAME_MEASUREMENT = ("prompt_words", "max_tokens", "min_tokens")
THIS_RUN = "this run"


@dataclass(frozen=True)
class MeasuredBasis:
    """Another candidate's gate-08 samples a floor is a fraction of, and where they were taken."""

    role: str  # REFERENCE or LANE_BASELINE
    candidate: str
    run: str  # the run id the samples were measured in
    source: str  # THIS_RUN, or "an earlier run" (the newest dated one with a PASS)
    samples: tuple[Mapping[str, Any], ...]
    settings: Mapping[str, Any] = field(default_factory=dict)  # SAME_MEASUREMENT keys

    def where(self) -> str:
        return f"{THIS_RUN}, {self.run}" if self.source == THIS_RUN else f"run {self.run}"

    def as_dict(self) -> dict[str, Any]:
        return {
            "role": self.role,
            "candidate": self.candidate,
            "run": self.run,
            "source": self.source,
            "settings": dict(self.settings),
            "samples": [dict(s) for s in self.samples],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MeasuredBasis:
        samples = data.get("samples")
        settings = data.get("settings")
        return cls(
            role=str(data.get("role") or ""),
            candidate=str(data.get("candidate") or ""),
            run=str(data.get("run") or ""),
            source=str(data.get("source") or ""),
            samples=tuple(
                s for s in (samples if isinstance(samples, list) else []) if isinstance(s, dict)
            ),
            settings=dict(settings) if isinstance(settings, Mapping) else {},
        )


@dataclass(frozen=True)
class Bases:
    """Everything a derived floor can be a fraction of, for one candidate in one run."""

    comparison: Mapping[str, Any] = field(default_factory=dict)  # compare_baseline()
    roofline: Mapping[str, Any] = field(default_factory=dict)  # roofline_for()
    # role -> the measured basis, or one line saying why there is none
    measured: Mapping[str, MeasuredBasis | str] = field(default_factory=dict)


@dataclass(frozen=True)
class Base:
    """The figure a floor is a fraction of, in words, with what it rests on."""

    value: float
    words: str
    basis: str  # REFERENCE, LANE_BASELINE, BASELINE or ROOFLINE
    candidate: str = ""
    run: str = ""


def unmeasured(spec: Mapping[str, Any], settings: Mapping[str, Any]) -> dict[str, str]:
    """Each measured basis the floors ask for, as it stands before a run: named, not measured."""
    names = basis_names(spec)
    return {
        role: f"{names[role]} is measured at run time"
        if role in names
        else f"no {role.replace('_', ' ')} named"
        for role in roles_used(settings)
    }


def roles_used(settings: Mapping[str, Any]) -> list[str]:
    """The measured bases a candidate's derived floors (or their fallbacks) ask for."""
    rules = (settings.get("derived_floors") or {}).values()
    asked = [r.get("of") for r in rules] + [(r.get("fallback") or {}).get("of") for r in rules]
    return [role for role in MEASURED if role in asked]


def measurement(settings: Mapping[str, Any]) -> dict[str, Any]:
    """What defines a sample, from gate 08's settings."""
    return {k: settings.get(k) for k in SAME_MEASUREMENT}


def mismatch(own: Mapping[str, Any], theirs: Mapping[str, Any]) -> str | None:
    """Why another candidate's samples are not the same figure as this one's, or None."""
    differ = [
        f"{k} {theirs.get(k)} there, {own.get(k)} here"
        for k in SAME_MEASUREMENT
        if own.get(k) != theirs.get(k)
    ]
    return "measured another way (" + ", ".join(differ) + ")" if differ else None


def base_of(key: str, of: str, bases: Bases, settings: Mapping[str, Any]) -> Base | str:
    """The figure ``of`` gives for ``key``, or why it gives none."""
    if of == ROOFLINE:
        return _roofline(bases.roofline)
    if of == BASELINE:
        return _baseline(key, bases.comparison)
    found = bases.measured.get(of)
    if found is None:
        return f"no {of.replace('_', ' ')} named"
    if isinstance(found, str):
        return found
    return _measured(key, found, settings)


def _measured(key: str, basis: MeasuredBasis, settings: Mapping[str, Any]) -> Base | str:
    if why := mismatch(measurement(settings), basis.settings):
        return f"{basis.candidate} ({basis.where()}) {why}"
    value = statistic(key, basis.samples)
    if value is None:
        return f"{basis.candidate} ({basis.where()}) has no sample with {key.rpartition('_')[0]}"
    words = f"{basis.candidate}'s {key} {value:.4g} ({basis.where()})"
    return Base(value, words, basis.role, basis.candidate, basis.run)


def _roofline(roofline: Mapping[str, Any]) -> Base | str:
    if not roofline.get("computed"):
        return f"the roofline is not computed ({roofline.get('why', 'no inputs')})"
    bound, where = float(roofline["bound_tok_s"]), roofline.get("bandwidth_from")
    named = "gpus.bandwidth_gbs" if where == "candidate" else where
    words = f"the roofline {bound:.4g} tok/s ({roofline['bandwidth_gbs']:g} GB/s, {named})"
    return Base(bound, words, ROOFLINE)


def _baseline(key: str, comparison: Mapping[str, Any]) -> Base | str:
    rows = comparison.get("rows") or []
    row = next((r for r in rows if isinstance(r, Mapping) and r.get("figure") == key), None)
    if row is None:
        return "the baseline has no such figure"
    if row.get("refused"):
        return f"the baseline figure is not compared: {row['refused']}"
    record = comparison.get("baseline") or {}
    date, tp = record.get("date"), record.get("tp", "?")  # the record's own TP size, never assumed
    return Base(
        float(row["baseline"]), f"the TP{tp} baseline {row['baseline']:g} ({date})", BASELINE
    )


def rule_words(key: str, rule: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """A derived floor's rule as ``--plan`` states it before anything is measured."""
    of = rule.get("of")
    if "value" in rule:
        return f"written {rule['value']:g}"
    fraction = f"{float(rule['fraction']):g} x"
    if of in MEASURED and str(of) not in names:
        table = "[lane] after" if of == LANE_BASELINE else "[reference] candidate"
        return f"{fraction} the {str(of).replace('_', ' ')}'s {key}, but none is named ({table})"
    if of in MEASURED:
        return (
            f"{fraction} {names[str(of)]}'s {key} as measured by gate 08 in this run, else in the "
            "newest earlier dated run with a PASS"
        )
    return f"{fraction} the {'TP1 [baseline] figure' if of == BASELINE else 'decode roofline'}"


def sample_rows(records: Sequence[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    """The measured samples of a ``throughput_samples.jsonl`` (the warm-up left out)."""
    return tuple(r for r in records if r.get("phase") == "sample")
