"""What a candidate file's floor tables may say (``gates.throughput.floors`` and
``derived_floors``): the ``<figure>_<stat>`` key grammar, each figure's direction, the bases a
derived floor may be a fraction of, and the problems a file is refused for when read. Pure, and
on the ground floor with the candidate model (``candidate_file`` reads it); judging floors
against samples is gate 08's (perf/floors.py, perf/floor_basis.py), built on this.

Figures as perf/sampling.py defines them, statistics as checks/stats.py ``summarize`` gives
them. A rate must reach its floor (decode tok/s ≥), a latency must stay under it (TTFT, TPOT,
ITL, E2E ≤): a TTFT floor read as a lower bound would pass the slow serve and fail the fast one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def split_key(key: str) -> tuple[str, str] | None:
    """``decode_tok_s_median`` -> (``decode_tok_s``, ``median``); None for no known figure/stat."""
    figure, _, stat = key.rpartition("_")
    return (figure, stat) if figure in DIRECTIONS and stat in STATS else None


def direction(key: str) -> str:
    parts = split_key(key)
    if parts is None:
        raise ValueError(f"{key}: not a <figure>_<stat> floor key")
    return DIRECTIONS[parts[0]]


REFERENCE, LANE_BASELINE, BASELINE, ROOFLINE = "reference", "lane_baseline", "baseline", "roofline"
MEASURED = (REFERENCE, LANE_BASELINE)  # another candidate's samples, measured by gate 08
WRITTEN = "written"
ROOFLINE_FIGURE = "decode_tok_s"  # the roofline bounds a decode rate, nothing else

ROOFLINE_INPUTS = ("active_params_b", "bits_per_weight")


def basis_names(spec: Mapping[str, Any]) -> dict[str, str]:
    """The candidate each measured basis names in a candidate file (absent: none named)."""
    after = (spec.get("lane") or {}).get("after")
    reference = (spec.get("reference") or {}).get("candidate") or after
    return {
        role: name
        for role, name in ((REFERENCE, reference), (LANE_BASELINE, after))
        if isinstance(name, str) and name
    }


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
        for where, part in ((key, rule), (f"{key}.fallback", rule.get("fallback") or {})):
            if part.get("of") == ROOFLINE and not key.startswith(ROOFLINE_FIGURE + "_"):
                problems.append(
                    f"gates.throughput.derived_floors.{where}: the roofline bounds "
                    f"{ROOFLINE_FIGURE} only; derive this floor of another basis or write it"
                )
    return problems


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
    """What a derived floor needs from the candidate file, for a rule whose fallback cannot
    stand in: for the roofline the model's active parameters and bits and the GPUs' bandwidth
    (NVML's is used when read), for the baseline a figure the comparison will not refuse (a local
    ``finding`` is read at run time), for a measured basis a candidate that names one."""
    problems = []
    for key, rule in sorted((settings.get("derived_floors") or {}).items()):
        first = _file_problem(key, rule, spec)
        fallback = rule.get("fallback")
        if first and (not fallback or _file_problem(key, fallback, spec)):
            problems.append(f"gates.throughput.derived_floors.{key}: {first}")
    return problems


def _file_problem(key: str, rule: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
    of = rule.get("of")
    if "value" in rule:
        return None
    if of in MEASURED:
        named = basis_names(spec).get(str(of))
        what = "[lane] after" if of == "lane_baseline" else "[reference] candidate or [lane] after"
        return None if named else f"of the {of}, but the candidate names none ({what})"
    if of == ROOFLINE:
        needs = [f"model.{f}" for f in ROOFLINE_INPUTS if not spec["model"].get(f)]
        needs += [] if (spec.get("gpus") or {}).get("bandwidth_gbs") else ["gpus.bandwidth_gbs"]
        return f"of the roofline, which needs {', '.join(needs)}" if needs else None
    baseline = spec.get("baseline") or {}
    if baseline.get("finding"):
        return None
    if key not in (baseline.get("figures") or {}):
        return f"of the baseline, but baseline.figures has no {key}"
    if why := refusal(key, baseline.get("definitions") or {}):
        return f"the baseline's {key} is not compared ({why}); derive it of another basis"
    return None
