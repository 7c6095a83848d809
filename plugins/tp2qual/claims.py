"""Claims and how each one is derived from its raw artifact.

A gate never states a figure it computed privately: it names the artifact and a derivation, and
the figure is computed *from the artifact on disk* by ``derive`` — the same function ``verify``
runs later. So a claim and its backing cannot drift apart.

Derivations are small dicts:
  {"op": "median"|"mean"|"min"|"max"|"stdev"|"count"|"all"|"sum", "field": F, "where": {K: V}}
      over the records of a JSONL artifact;
  {"op": "field", "path": "a.b.0.c"} over a JSON artifact (or the last JSONL record).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

_REDUCERS: dict[str, Callable[[list[Any]], Any]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "min": min,
    "max": max,
    "sum": math.fsum,
    "count": len,
    "all": lambda values: all(bool(v) for v in values),
    "stdev": lambda values: statistics.stdev(values) if len(values) > 1 else 0.0,
}


class DerivationError(ValueError):
    """The artifact does not contain what the derivation asks for."""


@dataclass(frozen=True)
class Claim:
    name: str
    value: Any
    artifact: str  # path relative to the candidate's folder
    derive: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_records(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [json.loads(path.read_text())]


def _lookup(obj: Any, dotted: str) -> Any:
    for part in dotted.split(".") if dotted else []:
        try:
            obj = obj[int(part)] if isinstance(obj, list) else obj[part]
        except (KeyError, IndexError, ValueError, TypeError):
            raise DerivationError(f"no {dotted!r} in artifact") from None
    return obj


def derive(path: Path, spec: dict[str, Any]) -> Any:
    """Compute a claim's value from its artifact."""
    if not path.is_file():
        raise DerivationError(f"artifact {path.name} is missing")
    records = read_records(path)
    op = spec.get("op", "field")
    if op == "field":
        if not records:
            raise DerivationError(f"artifact {path.name} is empty")
        return _lookup(records[-1], spec.get("path", ""))
    where = spec.get("where", {})
    chosen = [r for r in records if all(r.get(k) == v for k, v in where.items())]
    if op == "count":
        return len(chosen)
    values = [_lookup(r, spec["field"]) for r in chosen]
    if not values:
        raise DerivationError(f"no records match {where} in {path.name}")
    reducer = _REDUCERS.get(op)
    if reducer is None:
        raise DerivationError(f"unknown derivation op {op!r}")
    return reducer(values)


def same(claimed: Any, derived: Any, rel_tol: float = 1e-9) -> bool:
    """Equal, with float tolerance (JSON round-trips floats exactly, but be kind to rounding)."""
    numbers = (int, float)
    if isinstance(claimed, numbers) and isinstance(derived, numbers) and not isinstance(
        claimed, bool
    ):
        return math.isclose(float(claimed), float(derived), rel_tol=rel_tol, abs_tol=1e-12)
    return claimed == derived
