"""A capacity-protocol run beside a dated record of the same protocol: divided only where like
is compared with like. Pure: takes the run's rows, its profile and a record's parsed raw JSON.

A record is the user's raw benchmark JSON (``anvil-serving.benchmark/v1``: ``measurement_protocol``,
``max_tokens``, ``request_timings`` with ``ttft_ms``, ``time_to_first_output_ms``,
``effective_prefill_tok_s``, ``decode_tok_s``, ``e2e_ms``, ``prompt_tokens``), copied into the
repository with its sha256, or one this suite wrote of its own run in the same shape
(``as_record``). Its figures are read from its per-request rows, so the interval has samples on
both sides.

Divided (ratio of the means, 95 % CI: ``comparison.ratio_interval``) only when the record is of
the same serve (the candidate or the baseline it is a lane of), the same protocol name (so the
same timing origins, ``protocol.ORIGINS``), the same TP size, the same output cap, and a median
prompt within the profile's tolerance of the record's. Otherwise both are shown, with every
reason it is not divided.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from tp2qual.perf.comparison import RATIO_METHOD, ratio_interval
from tp2qual.perf.protocol import FIGURES, ORIGINS, V3

# The user's records carry "anvil-serving.benchmark/v1"; one this suite writes names itself, with
# the same fields ``record_rows`` reads.
RECORD_SCHEMA = "tp2qual.protocol-record/v1"


def record_rows(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A record's requests in this suite's figure names (seconds; TTFO = TTFT where the record
    has no separate first output, as under capacity-v3)."""
    rows = []
    for r in body.get("request_timings") or []:
        if not isinstance(r, dict) or r.get("ttft_ms") is None:
            continue
        ttfo = r.get("time_to_first_output_ms")
        ttfo = r["ttft_ms"] if ttfo is None else ttfo
        rows.append(
            {
                "ok": True,
                "prompt_tokens": r.get("prompt_tokens"),
                "ttfo_s": ttfo / 1000.0,
                "ttft_s": r["ttft_ms"] / 1000.0,
                "effective_prefill_tok_s": r.get("effective_prefill_tok_s"),
                "decode_tok_s": r.get("decode_tok_s"),
                "e2e_s": r["e2e_ms"] / 1000.0 if r.get("e2e_ms") is not None else None,
            }
        )
    return rows


def as_record(
    rows: Sequence[Mapping[str, Any]], profile: Mapping[str, Any], meta: Mapping[str, Any]
) -> dict[str, Any]:
    """This suite's own run written as a record of the user's shape (what ``record_rows``
    reads back), its requests as measured; ``meta``: model, started_at, gpu, engine."""
    timings = [
        {
            "request_index": i,
            "prompt_tokens": r["prompt_tokens"],
            "output_tokens": r["output_tokens"],
            "time_to_first_output_ms": r["ttfo_s"] * 1000.0,
            "ttft_ms": r["ttft_s"] * 1000.0,
            "e2e_ms": r["e2e_s"] * 1000.0,
            "effective_prefill_tok_s": r["effective_prefill_tok_s"],
            "decode_tok_s": r["decode_tok_s"],
        }
        for i, r in enumerate(rows)
        if r.get("ok")
    ]
    return {
        "schema": RECORD_SCHEMA,
        "written_by": "tp2qual (perf/protocol_compare.py as_record), from its own raw exchanges",
        "measurement_protocol": profile["name"],
        "concurrency": 1,
        "requests": profile["requests"],
        "completed": len(timings),
        "max_tokens": profile["max_tokens"],
        "timing_methodology": ORIGINS[profile["name"]],
        **dict(meta),
        "request_timings": timings,
    }


def _median(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [float(r[key]) for r in rows if r.get("ok") and r.get(key) is not None]
    return statistics.median(values) if values else None


def differences(
    profile: Mapping[str, Any],
    serves: Sequence[str],
    tp: int,
    rows: Sequence[Mapping[str, Any]],
    record: Mapping[str, Any],
    body: Mapping[str, Any],
) -> list[str]:
    """Every reason the run and the record are not like for like (empty: divide).
    ``record``: the candidate's entry (serve, tp, ...); ``body``: the record's raw JSON."""
    why = []
    if record.get("serve") not in serves:
        why.append(f"another serve: the record is of {record.get('serve')}, not {serves[0]}")
    if (theirs := body.get("measurement_protocol")) != profile["name"]:
        why.append(f"protocol {theirs}, this run {profile['name']} (other timing origins)")
    if record.get("tp") != tp:
        why.append(f"TP{record.get('tp')} record, TP{tp} serve")
    if body.get("max_tokens") != profile["max_tokens"]:
        why.append(f"output cap {body.get('max_tokens')}, this run {profile['max_tokens']}")
    if body.get("concurrency", 1) != 1:
        why.append(f"concurrency {body.get('concurrency')}, this run 1")
    ours, theirs_p = _median(rows, "prompt_tokens"), _median(record_rows(body), "prompt_tokens")
    tolerance = profile["prompt_tolerance"]
    if ours is None or theirs_p is None:
        why.append("a median prompt size is unknown")
    elif abs(ours / theirs_p - 1) > tolerance:
        why.append(
            f"prompt {ours:.0f} tokens (median), the record's {theirs_p:.0f}: "
            f"outside {tolerance:.0%}"
        )
    return why


def beside(
    profile: Mapping[str, Any],
    serves: Sequence[str],
    tp: int,
    rows: Sequence[Mapping[str, Any]],
    record: Mapping[str, Any],
    body: Mapping[str, Any],
) -> dict[str, Any]:
    """The run's medians beside the record's, per figure; the ratio and its interval only
    where ``differences`` finds none."""
    theirs = record_rows(body)
    why = differences(profile, serves, tp, rows, record, body)
    figures = []
    for key in FIGURES:
        if profile["name"] == V3 and key == "ttfo_s":
            continue  # v3: the same instant as ttft_s
        now = [float(r[key]) for r in rows if r.get("ok") and r.get(key) is not None]
        then = [float(r[key]) for r in theirs if r.get(key) is not None]
        row: dict[str, Any] = {
            "figure": key,
            "median": statistics.median(now) if now else None,
            "record_median": statistics.median(then) if then else None,
            "n": len(now),
            "record_n": len(then),
        }
        if not why and key != "prompt_tokens":
            row["ratio"] = ratio_interval(now, then)
        figures.append(row)
    entry = {k: record.get(k) for k in ("path", "date", "tp", "serve", "source", "sha256")}
    return {
        "record": entry,
        "protocol": body.get("measurement_protocol"),
        "divided": not why,
        "not_divided_because": why,
        "method": RATIO_METHOD if not why else None,
        "figures": figures,
    }
