"""Claims and how each one is derived from its raw artifact.

A gate never states a figure it computed privately: it names the artifact and a derivation, and
the figure is computed *from the artifact on disk* by ``derive`` — the same function ``verify``
runs later. So a claim and its backing cannot drift apart.

Derivations are small dicts:
  {"op": "median"|"mean"|"min"|"max"|"stdev"|"count"|"all"|"sum", "field": F, "where": {K: V}}
      over the records of a JSONL artifact;
  {"op": "field", "path": "a.b.0.c"} over a JSON artifact (or the last JSONL record).

A claim also records the artifact's sha256 and length *at claim time*. Artifacts only grow
(JSONL appends) or are replaced whole, so ``verify`` re-derives each claim from exactly those
bytes — the first ``bytes`` of the file, which must still hash to ``sha256``.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
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
    sha256: str = ""  # of the artifact's first ``bytes`` bytes, at claim time
    bytes: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_records(path: Path) -> list[dict[str, Any]]:
    return parse_records(path.read_text(), jsonl=path.suffix == ".jsonl")


def parse_records(text: str, *, jsonl: bool) -> list[dict[str, Any]]:
    if jsonl:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]


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
    return derive_from(path.read_bytes(), path, spec)


def derive_from(data: bytes, path: Path, spec: dict[str, Any]) -> Any:
    """Compute a claim's value from the artifact's bytes (``path`` names it and its kind)."""
    try:
        records = parse_records(data.decode("utf-8"), jsonl=path.suffix == ".jsonl")
    except (UnicodeDecodeError, ValueError) as exc:
        raise DerivationError(f"artifact {path.name} does not parse: {exc}") from None
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


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_claim(root: Path, name: str, artifact: str, spec: dict[str, Any]) -> Claim:
    """Derive a claim from its artifact and stamp it with the bytes it was derived from."""
    path = root / artifact
    if not path.is_file():
        raise DerivationError(f"artifact {artifact} is missing")
    data = path.read_bytes()
    value = derive_from(data, path, spec)
    return Claim(name, value, artifact, spec, sha256_bytes(data), len(data))


def stamp(root: Path, claim: Claim) -> Claim:
    """The claim with its artifact's current sha256 and length, when it has none yet."""
    path = root / claim.artifact
    if claim.sha256 or not claim.artifact or not path.is_file():
        return claim
    data = path.read_bytes()
    return replace(claim, sha256=sha256_bytes(data), bytes=len(data))


def same(claimed: Any, derived: Any, rel_tol: float = 1e-9) -> bool:
    """Equal, with float tolerance (JSON round-trips floats exactly, but be kind to rounding)."""
    numbers = (int, float)
    if (
        isinstance(claimed, numbers)
        and isinstance(derived, numbers)
        and not isinstance(claimed, bool)
    ):
        return math.isclose(float(claimed), float(derived), rel_tol=rel_tol, abs_tol=1e-12)
    return claimed == derived
