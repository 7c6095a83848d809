"""Gate 08's capacity protocol (``[gates.throughput.protocol]``), re-derived from its raw streams.

Each ``protocol#N`` stream of ``throughput.jsonl`` is measured again (``perf.protocol.
request_figures`` on its recorded chunks, their arrival times and the stream's end) against
``protocol_samples.jsonl``; the statistics against ``protocol_summary.json``; and each record's
comparison against ``protocol_beside.json``, from the record's copy in the evidence, its bytes
held to the sha256 the run's settings pin (``perf.protocol_compare.beside``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tp2qual.evidence.protocol_records import copy_name, parsed
from tp2qual.evidence.rederive.common import GateRun, Rederived, by_tag, chunks_of
from tp2qual.perf.protocol import protocol_problems, request_figures, summary
from tp2qual.perf.protocol_compare import beside

SAMPLES, SUMMARY, BESIDE = "protocol_samples.jsonl", "protocol_summary.json", "protocol_beside.json"
_KEYS = ("ok", "prompt_tokens", "output_tokens", "ttfo_s", "ttft_s", "e2e_s")
_RATES = ("effective_prefill_tok_s", "decode_tok_s")


def protocol(run: GateRun, profile: dict[str, Any]) -> Rederived:
    streams = by_tag(run.records("throughput.jsonl"))
    out = Rederived(rows={SAMPLES: []})
    for row in run.records(SAMPLES, required=False):
        tag = f"protocol#{row.get('i')}"
        exchange = streams.get(tag)
        if exchange is None or "chunks" not in exchange:
            out.unmatched(tag, SAMPLES, row, what="stream", found="no such stream",
                          recorded="a request's figures")  # fmt: skip
            continue
        out.records += 1
        chunks, times = chunks_of(exchange)
        new = (
            request_figures(chunks, times, exchange.get("e2e_s"))
            if exchange.get("status") == 200
            else {"ok": False, "reason": f"HTTP {exchange.get('status')}"}
        )
        keys = [k for k in (*_KEYS, *_RATES) if k in new]
        out.compare(f"throughput.jsonl {tag}", SAMPLES, row, **{k: new[k] for k in keys})
        out.rows[SAMPLES].append({"i": row.get("i"), **new})
        if not new.get("ok"):
            out.failures.append(f"throughput.jsonl {tag}: {new.get('reason')}")
    rows = out.rows[SAMPLES]
    if len(rows) < profile["requests"]:
        out.failures.append(f"{len(rows)} of {profile['requests']} protocol requests")
        return out
    out.failures += protocol_problems(profile["name"], rows)
    _summary(run, rows, out)
    _beside(run, profile, rows, out)
    return out


def _summary(run: GateRun, rows: list[dict[str, Any]], out: Rederived) -> None:
    written = (run.json(SUMMARY) or {}).get("summary") or {}
    for name, stats in summary(rows).items():
        for stat in ("median", "mean", "ci95_low", "ci95_high"):
            out.compare(
                f"{SAMPLES} ({name})",
                SUMMARY,
                {f"{name}.{stat}": (written.get(name) or {}).get(stat)},
                **{f"{name}.{stat}": stats[stat]},
            )


def _beside(run: GateRun, profile: dict[str, Any], rows: list[dict], out: Rederived) -> None:
    written = _as_list(run)
    resolved = run.recorded()
    after = resolved.get("lane_after")  # the serve a lane shares with its baseline
    serves = [resolved.get("name"), *([after] if after else [])]
    tp = int(resolved.get("tp") or 0)  # none recorded: no TP matches, nothing divided
    for n, entry in enumerate(profile.get("records", [])):
        path = run.root / copy_name(entry)
        recorded = written[n] if n < len(written) else {}
        if not path.is_file():
            if recorded.get("divided"):
                out.failures.append(f"{copy_name(entry)}: divided, but no copy of the record")
            continue
        raw = path.read_bytes()
        if hashlib.sha256(raw).hexdigest() != entry.get("sha256"):
            out.failures.append(f"{copy_name(entry)}: not the bytes pinned ({entry.get('sha256')})")
            continue
        new = beside(profile, serves, tp, rows, entry, parsed(raw) or {})
        out.compare(f"{copy_name(entry)} beside {SAMPLES}", BESIDE, recorded,
                    divided=new["divided"], figures=new["figures"])  # fmt: skip


def _as_list(run: GateRun) -> list[dict[str, Any]]:
    """protocol_beside.json: a JSON list, one entry per record named."""
    path = run.root / BESIDE
    try:
        body = json.loads(path.read_text()) if path.is_file() else []
    except ValueError:
        return []
    return [b for b in body if isinstance(b, dict)] if isinstance(body, list) else []
