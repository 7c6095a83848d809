"""Gate 08 (throughput): each measured stream's sample, the summary and the floors again.

From ``throughput.jsonl``, each stream's sample is measured again (``perf.sampling.sample``,
with the output tokens counted by the gate's own ``output_tokens``), the samples summarized
(``perf.sampling.summary``) against ``throughput_summary.json``, the decode bound recomputed
from ``roofline.json``'s inputs (``perf.roofline.decode_bound``) and the floors derived (a
measured basis from the samples ``throughput_reference.json`` copied) and checked in their
direction (``perf.floors``). The rows re-derived are
``throughput_samples.jsonl``'s. A candidate that runs the capacity protocol instead is
re-derived by ``rederive/protocol.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tp2qual.artifacts.layout import read_json_object
from tp2qual.checks.replies import stream_usage
from tp2qual.evidence.rederive.common import GateRun, Rederived, chunks_of
from tp2qual.evidence.rederive.protocol import protocol
from tp2qual.evidence.throughput_reference import recorded_bases
from tp2qual.perf import floors
from tp2qual.perf.roofline import decode_bound
from tp2qual.perf.sampling import FIGURES, judge_ending, output_tokens, sample, summary

# What roofline.json records of the bound's inputs (perf/comparison.py roofline_for).
ROOFLINE_INPUTS = ("active_params_b", "bits_per_weight", "bandwidth_gbs", "tp")


def throughput(run: GateRun) -> Rederived:
    if "protocol" in run.settings:  # the protocol ran instead of the single-stream samples
        return protocol(run, run.settings["protocol"])
    raw = run.records("throughput.jsonl")
    out = Rederived(rows={"throughput_samples.jsonl": []})
    # A run recorded before endings were judged names no finish_reasons: its own rule.
    figures = _samples_from_streams(raw, run.settings.get("finish_reasons"))
    rows = run.records("throughput_samples.jsonl", required=False)
    for row in rows:
        tag = f"{row.get('phase')}#{row.get('i')}"
        new = figures.get(tag)
        if new is None:
            out.unmatched(
                f"throughput.jsonl {tag}", "throughput_samples.jsonl", row,
                what="exchange", found="no such stream", recorded="a sample",
            )  # fmt: skip
            continue
        out.records += 1
        keys = ("ok", "ttft_s", "e2e_s", "tpot_s", "decode_tok_s", "output_tokens")
        out.compare(
            f"throughput.jsonl {tag}",
            "throughput_samples.jsonl",
            row,
            **{k: new[k] for k in keys if k in new},
        )
        out.rows["throughput_samples.jsonl"].append({**row, **new})
        if not new.get("ok"):
            out.failures.append(f"throughput.jsonl {tag}: {new.get('reason', 'under 2 tokens')}")
    samples = [r for r in out.rows["throughput_samples.jsonl"] if r.get("phase") == "sample"]
    if len(samples) < run.settings["samples"]:
        out.failures.append(f"{len(samples)} of {run.settings['samples']} samples")
    elif all(r.get("ok") for r in samples):
        _summary(run, samples, out)
    return out


def _samples_from_streams(
    raw: list[dict[str, Any]], allowed: Sequence[str] | None
) -> dict[str, dict[str, Any]]:
    """Each measured stream's sample, as ``perf.throughput.measure`` derives it: output tokens
    counted by ``perf.sampling.output_tokens`` (``usage``, else the ``tokenize`` exchange that
    follows the stream, else its chunks)."""
    found: dict[str, dict[str, Any]] = {}
    for n, exchange in enumerate(raw):
        if "chunks" not in exchange:
            continue
        if exchange.get("status") != 200:
            found[str(exchange.get("tag"))] = {
                "ok": False,
                "reason": f"HTTP {exchange.get('status')}",
            }
            continue
        chunks, times = chunks_of(exchange)
        follow = raw[n + 1] if n + 1 < len(raw) else {}
        tokenized = (
            (follow.get("status"), follow.get("response"))
            if follow.get("tag") == "tokenize"
            else None
        )
        count, method = output_tokens(stream_usage(chunks), tokenized, chunks)
        figures = sample(chunks, times, count, method)
        found[str(exchange.get("tag"))] = judge_ending(figures, chunks, allowed)
    return found


def _summary(run: GateRun, samples: list[dict[str, Any]], out: Rederived) -> None:
    """checks.stats over the re-derived samples: the summary file, then the floors."""
    stats = summary(samples)
    recorded = run.root / "throughput_summary.json"
    try:
        written = json.loads(recorded.read_text()) if recorded.is_file() else None
    except ValueError:
        written = None
    if written is None:
        out.failures.append("throughput_summary.json is missing or unreadable")
    else:
        for name in FIGURES:
            for stat in ("median", "mean"):
                out.compare(
                    f"throughput.jsonl samples ({name})",
                    "throughput_summary.json",
                    {f"{name}.{stat}": (written.get(name) or {}).get(stat)},
                    **{f"{name}.{stat}": stats[name][stat]},
                )
    roof = read_json_object(run.root / "roofline.json")
    if roof.get("computed"):  # a floor derived of the bound rests on its inputs, not its figure
        out.compare("roofline.json inputs", "roofline.json", roof, bound_tok_s=_bound(roof))
    judged = floors.judged_floors(
        run.settings,
        read_json_object(run.root / "throughput_comparison.json"),
        roof,
        recorded_bases(run.root),  # the reference's or baseline's samples, as gate 08 copied them
    )  # the gate's own derivation and check, in its direction (perf/floors.py)
    out.failures += [*judged.not_derived, *floors.misses(judged.floors, samples)]


def _bound(roof: Mapping[str, Any]) -> float | str:
    """The decode bound that roofline.json's own inputs give (perf/roofline.py)."""
    try:
        return decode_bound(*(roof[k] for k in ROOFLINE_INPUTS)).bound_tok_s
    except (KeyError, TypeError, ValueError) as exc:
        return f"no bound: {exc}"
