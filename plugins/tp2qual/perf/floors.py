"""Throughput floors: which way each figure is judged, where each floor comes from, the check.

A rate must reach its floor (decode tok/s ≥), a latency must stay under it (TTFT, TPOT, ITL,
E2E ≤): a TTFT floor read as a lower bound would pass the slow serve and fail the fast one. One
place for gate 08 (tests/test_08_throughput.py), its re-derivation (evidence/rederive/), the
claim rule there and ``--plan``. Pure: settings, figures and samples in, floors and misses out.

A floor is ``<figure>_<stat>`` (``decode_tok_s_median``, ``ttft_s_p90``: figures as
perf/sampling.py defines them, statistics as checks/stats.py ``summarize`` gives them). It is
written in the candidate (``gates.throughput.floors``, its source the table's ``why``) or derived
at run time from the candidate's own evidence (``gates.throughput.derived_floors``): a fraction
of the dated TP1 figure where its definition is the suite's (perf/comparison.py), or of the
single-stream roofline (perf/roofline.py) for a decode rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from tp2qual.checks.stats import summarize

AT_LEAST = "≥"
AT_MOST = "≤"

# Per figure of perf/sampling.py: rates at least their floor, latencies at most.
DIRECTIONS: dict[str, str] = {
    "decode_tok_s": AT_LEAST,
    "ttft_s": AT_MOST,
    "tpot_s": AT_MOST,
    "itl_p50_s": AT_MOST,
    "itl_p90_s": AT_MOST,
    "itl_p99_s": AT_MOST,
    "e2e_s": AT_MOST,
}
STATS = ("median", "mean", "p90", "p99", "min", "max")
ROOFLINE_FIGURE = "decode_tok_s"  # the roofline bounds a decode rate, nothing else
ROOFLINE_INPUTS = ("active_params_b", "bits_per_weight")
FLOORS_FILE = "throughput_floors.json"  # gate 08's floors as judged, beside its samples
NO_FLOOR = "no floor set: the samples are measured and judged against no floor"


@dataclass(frozen=True)
class Floor:
    """One floor as judged: its key, bound, direction and where the bound came from."""

    key: str
    value: float
    direction: str
    source: str

    def met_by(self, measured: float) -> bool:
        return measured >= self.value if self.direction == AT_LEAST else measured <= self.value

    def line(self) -> str:
        return f"{self.key} {self.direction} {self.value:.4g}  ({self.source})"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def split_key(key: str) -> tuple[str, str] | None:
    """``decode_tok_s_median`` -> (``decode_tok_s``, ``median``); None for no known figure/stat."""
    figure, _, stat = key.rpartition("_")
    return (figure, stat) if figure in DIRECTIONS and stat in STATS else None


def key_problems(settings: Mapping[str, Any]) -> list[str]:
    """Floor keys and derivations the check could not judge, each naming its field."""
    problems = []
    for table in ("floors", "derived_floors"):
        for key in settings.get(table) or {}:
            if split_key(key) is None:
                problems.append(
                    f"gates.throughput.{table}.{key}: not <figure>_<stat> (figures: "
                    f"{', '.join(DIRECTIONS)}; stats: {', '.join(STATS)})"
                )
    for key, rule in (settings.get("derived_floors") or {}).items():
        if rule.get("of") == "roofline" and not key.startswith(ROOFLINE_FIGURE + "_"):
            problems.append(
                f"gates.throughput.derived_floors.{key}: the roofline bounds {ROOFLINE_FIGURE} "
                "only; derive this floor of the baseline or write it in floors"
            )
    return problems


def written_floors(settings: Mapping[str, Any]) -> list[Floor]:
    """``gates.throughput.floors``: set by hand; the source is the table's ``why``."""
    why = settings.get("why")
    source = f"written in the candidate: {why}" if why else "written in the candidate, no why"
    return [
        Floor(key, float(value), _direction(key), source)
        for key, value in sorted((settings.get("floors") or {}).items())
    ]


def derived_floors(
    settings: Mapping[str, Any],
    comparison: Mapping[str, Any],
    roofline: Mapping[str, Any],
) -> tuple[list[Floor], list[str]]:
    """``gates.throughput.derived_floors`` from this run's evidence: the floors, and for each one
    that cannot be derived, why (the baseline figure refused, the roofline not computed)."""
    floors, missing = [], []
    for key, rule in sorted((settings.get("derived_floors") or {}).items()):
        fraction, of = float(rule["fraction"]), rule["of"]
        base, basis = _basis(key, of, comparison, roofline)
        if base is None:
            missing.append(f"derived_floors.{key} (of {of}): {basis}")
            continue
        source = f"{fraction:g} x {basis}; {rule.get('why', 'no why')}"
        floors.append(Floor(key, fraction * base, _direction(key), source))
    return floors, missing


@dataclass(frozen=True)
class FloorSet:
    """Every floor gate 08 judges, and the derived ones this run's evidence could not give."""

    floors: tuple[Floor, ...]
    not_derived: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        return [f.line() for f in self.floors] or [NO_FLOOR]

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": len(self.floors),
            "floors": [f.as_dict() for f in self.floors],
            "not_derived": list(self.not_derived),
            "note": None if self.floors else NO_FLOOR,
        }


def judged_floors(
    settings: Mapping[str, Any], comparison: Mapping[str, Any], roofline: Mapping[str, Any]
) -> FloorSet:
    """The written floors, then the derived ones (``comparison``: perf/comparison.py
    ``compare_baseline``; ``roofline``: ``roofline_for``)."""
    derived, missing = derived_floors(settings, comparison, roofline)
    return FloorSet((*written_floors(settings), *derived), tuple(missing))


def _basis(
    key: str, of: str, comparison: Mapping[str, Any], roofline: Mapping[str, Any]
) -> tuple[float | None, str]:
    if of == "roofline":
        if not roofline.get("computed"):
            return None, f"the roofline is not computed ({roofline.get('why', 'no inputs')})"
        bound, where = float(roofline["bound_tok_s"]), roofline.get("bandwidth_from")
        named = "gpus.bandwidth_gbs" if where == "candidate" else where
        return (
            bound,
            f"the roofline {bound:.4g} tok/s ({roofline['bandwidth_gbs']:g} GB/s, {named})",
        )
    row = next((r for r in comparison.get("rows", []) if r.get("figure") == key), None)
    if row is None:
        return None, "the baseline has no such figure"
    if row.get("refused"):
        return None, f"the baseline figure is not compared: {row['refused']}"
    date = (comparison.get("baseline") or {}).get("date")
    return float(row["baseline"]), f"the TP1 baseline {row['baseline']:g} ({date})"


SUITE_DEFINITION = "perf/sampling.py"


def refusal(key: str, definitions: Mapping[str, str]) -> str | None:
    """Why a baseline figure copied from elsewhere is not compared with this run's, or None
    when its stated definition is the suite's."""
    stated = definitions.get(key)
    if stated == SUITE_DEFINITION:
        return None
    if stated is None:
        return f"its definition is not stated (baseline.definitions.{key})"
    return f"not the same definition as the suite's ({SUITE_DEFINITION}): {stated}"


def derivation_problems(settings: Mapping[str, Any], spec: Mapping[str, Any]) -> list[str]:
    """What a derived floor needs from the candidate file: for the roofline the model's active
    parameters and bits and the GPUs' bandwidth (NVML's is used when read), for the baseline a
    figure the comparison will not refuse (a local ``finding`` is read at run time)."""
    problems = []
    for key, rule in sorted((settings.get("derived_floors") or {}).items()):
        where = f"gates.throughput.derived_floors.{key}"
        if rule.get("of") == "roofline":
            needs = [f"model.{f}" for f in ROOFLINE_INPUTS if not spec["model"].get(f)]
            needs += [] if (spec.get("gpus") or {}).get("bandwidth_gbs") else ["gpus.bandwidth_gbs"]
            problems += (
                [f"{where}: of the roofline, which needs {', '.join(needs)}"] if needs else []
            )
        elif not (baseline := spec.get("baseline") or {}).get("finding"):
            figures = baseline.get("figures") or {}
            if key not in figures:
                problems.append(f"{where}: of the baseline, but baseline.figures has no {key}")
            elif why := refusal(key, baseline.get("definitions") or {}):
                problems.append(
                    f"{where}: the baseline's {key} is not compared ({why}); derive it of the "
                    "roofline"
                )
    return problems


def _direction(key: str) -> str:
    parts = split_key(key)
    if parts is None:
        raise ValueError(f"{key}: not a <figure>_<stat> floor key")
    return DIRECTIONS[parts[0]]


def measured(key: str, samples: Sequence[Mapping[str, Any]]) -> float | None:
    """The statistic a floor names, over the measured samples (None: no sample has the figure)."""
    figure, stat = split_key(key) or (key, "")
    values = [float(s[figure]) for s in samples if isinstance(s.get(figure), int | float)]
    return summarize(values).as_dict()[stat] if values else None


def misses(floors: Sequence[Floor], samples: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per floor the samples do not meet, in the floor's own direction."""
    lines = []
    for floor in floors:
        value = measured(floor.key, samples)
        if value is None:
            figure = floor.key.rpartition("_")[0]
            lines.append(f"{floor.key}: no measured sample has {figure}")
        elif not floor.met_by(value):
            lines.append(f"{floor.key} = {value:.4g}, floor {floor.direction} {floor.value:.4g}")
    return lines


def claim_meets(name: str, value: Any, settings: Mapping[str, Any]) -> bool | None:
    """Whether a throughput claim meets its written floor in the floor's direction; None when
    no written floor names it (a derived floor is judged on ``throughput_floors.json``)."""
    floor = (settings.get("floors") or {}).get(name)
    if floor is None or split_key(name) is None:
        return None
    bound = Floor(name, float(floor), _direction(name), "written")
    return isinstance(value, int | float) and bound.met_by(float(value))
