"""The report's part for a capacity-protocol run (gate 08's ``[gates.throughput.protocol]``): its
statistics, labelled with the protocol's own definitions, and each dated record beside it —
the ratio and its interval where the two are like for like, else both medians and why they are
not divided (``perf/protocol_compare.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tp2qual.artifacts.layout import read_json_object
from tp2qual.evidence.report_model import StatRow, fmt

PROTOCOL_SUMMARY, PROTOCOL_BESIDE = "protocol_summary.json", "protocol_beside.json"

# Each figure's title and unit, in the protocol's words (perf/protocol.py).
TITLES = {
    "prompt_tokens": ("prompt (actual, usage)", "tokens"),
    "ttfo_s": ("TTFO: first output, either channel", "s"),
    "ttft_s": ("TTFT: first visible content", "s"),
    "effective_prefill_tok_s": ("effective prefill (prompt / TTFO, queueing included)", "tok/s"),
    "decode_tok_s": ("decode (from first output)", "tok/s"),
    "e2e_s": ("end-to-end", "s"),
}


def protocol_stats(cand_dir: Path) -> tuple[StatRow, ...]:
    """The protocol's statistics table, or () when the candidate ran no protocol."""
    stats = read_json_object(cand_dir / PROTOCOL_SUMMARY).get("summary")
    if not isinstance(stats, dict):
        return ()
    rows = []
    for key, (title, unit) in TITLES.items():
        if isinstance(s := stats.get(key), dict):
            ci = f"[{fmt(s.get('ci95_low'))}, {fmt(s.get('ci95_high'))}]"
            cells = tuple(fmt(s.get(k)) for k in ("n", "mean", "median", "stdev", "p90", "p99"))
            rows.append(StatRow(title, unit, (*cells, ci)))
    return tuple(rows)


def protocol_facts(cand_dir: Path) -> list[tuple[str, str]]:
    """The profile as run (scaled, said so) and each record beside it."""
    profile = read_json_object(cand_dir / PROTOCOL_SUMMARY).get("profile")
    if not isinstance(profile, dict):
        return []
    shape = (
        f"{profile.get('name')}: {profile.get('requests')} requests at c1, "
        f"{fmt(profile.get('prompt_tokens'))} prompt tokens wanted, cap {profile.get('max_tokens')}"
    )
    facts = [("capacity protocol", shape)]
    if profile.get("scaled"):
        facts.append(("scaled", str(profile["scaled"])))
    for entry in _beside(cand_dir):
        facts += _record_facts(entry)
    return facts


def _beside(cand_dir: Path) -> list[dict[str, Any]]:
    try:
        body = json.loads((cand_dir / PROTOCOL_BESIDE).read_text())
    except (OSError, ValueError):
        return []
    return [b for b in body if isinstance(b, dict)] if isinstance(body, list) else []


def _record_facts(entry: dict[str, Any]) -> list[tuple[str, str]]:
    rec = entry.get("record") or {}
    label = f"record {rec.get('date')} TP{rec.get('tp')} {rec.get('serve')}"
    facts = [(label, f"{entry.get('protocol')} · {rec.get('source')} · sha256 {rec.get('sha256')}")]
    if not entry.get("divided"):
        why = "; ".join(entry.get("not_divided_because") or ["unknown"])
        facts.append((f"{label}: not divided", why))
    for fig in entry.get("figures") or []:
        title = TITLES.get(str(fig.get("figure")), (fig.get("figure"), ""))[0]
        now, then = fmt(fig.get("median")), fmt(fig.get("record_median"))
        pair = f"{now} / {then} (medians, this / record)"
        if isinstance(r := fig.get("ratio"), dict):
            ci = f"[{fmt(r.get('low'))}, {fmt(r.get('high'))}]"
            pair += f"; ratio of means {fmt(r.get('ratio'))}, 95 % CI {ci}"
            pair += f" (n {r.get('n')} / {r.get('n_reference')})"
        facts.append((f"{label}: {title}", pair))
    return facts
