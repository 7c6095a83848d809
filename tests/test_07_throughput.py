"""Gate 07 — single-stream throughput.

Runs only after every functional gate passed (a corrupt server is not benchmarked). Pass means:
after a discarded warm-up, at least five streamed samples, one request at a time, with a fixed
prompt and output length, each yielding TTFT, TPOT, inter-chunk gaps, decode tokens/s and
end-to-end time (definitions in ``tp2qual.sampling``); the statistics (mean, median, stdev,
p90/p99, 95 % CI) derived from the samples; and every floor the candidate sets met. Beside the
samples: ratios to the candidate's dated TP1 baseline (corroborated only by a local finding) and
the measured decode rate as a fraction of the GPUs' single-stream roofline.
Artifacts: ``throughput_samples.jsonl`` (one line per request), ``throughput_summary.json``,
``throughput_comparison.json``, ``roofline.json``.
"""

from __future__ import annotations

import pytest

from tp2qual.checks.stats import summarize
from tp2qual.comparison import compare_baseline, roofline_for
from tp2qual.identity import load_finding
from tp2qual.prompts import filler
from tp2qual.sampling import sample

pytestmark = pytest.mark.throughput

SAMPLES = "throughput_samples.jsonl"
FIGURES = ("ttft_s", "tpot_s", "decode_tok_s", "e2e_s")


def _count_tokens(api, candidate, stream) -> tuple[int, str]:
    usage = stream.usage()
    if usage and usage.get("completion_tokens"):
        return usage["completion_tokens"], "usage"
    # llama-cpp-python ignores stream_options.include_usage: ask its own tokenizer.
    counted = api.request(
        "tokenize",
        "POST",
        "/extras/tokenize",
        {"model": candidate.served_name, "input": stream.text()},
        timeout=30,
    )
    if counted.status == 200 and "tokens" in counted.body:
        return len(counted.body["tokens"]), "server_tokenizer"
    chunks = [
        c for c in stream.chunks if (c.get("choices") or [{}])[0].get("delta", {}).get("content")
    ]
    return len(chunks), "chunks"


def _body(candidate, settings: dict, n: int) -> dict:
    # Each request starts with different text, so no prefix cache turns TTFT into a cache hit.
    sentences = max(1, settings["prompt_words"] // 20)
    prompt = filler(sentences, start=1 + 1000 * n) + " Now write a long story about the harbour."
    return {
        "model": candidate.served_name,
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "seed": 1234,
        "max_tokens": settings["max_tokens"],
        "stream_options": {"include_usage": True},
    }


def test_single_stream_samples(api, candidate, record, claim):
    settings = candidate.gate("throughput")
    runs = [("warmup", i) for i in range(settings["warmup"])]
    runs += [("sample", i) for i in range(settings["samples"])]
    for n, (phase, i) in enumerate(runs):
        stream = api.stream_chat(f"{phase}#{i}", _body(candidate, settings, n))
        assert stream.status == 200, f"{phase} {i}: HTTP {stream.status}: {stream.error_body}"
        tokens, method = _count_tokens(api, candidate, stream)
        figures = sample(stream.chunks, stream.times, tokens, method)
        record.evidence.append_jsonl(SAMPLES, {"phase": phase, "i": i, **figures})
        assert figures["ok"], f"{phase} {i}: {figures.get('reason', 'fewer than 2 tokens')}"
    summary = {}
    for name in FIGURES:
        summary[name] = summarize([r[name] for r in _samples(record)]).as_dict()
        for stat in ("median", "mean"):
            claim(f"{name}_{stat}", SAMPLES, op=stat, field=name, where={"phase": "sample"})
    claim("samples", SAMPLES, op="count", where={"phase": "sample"})
    record.evidence.write_json("throughput_summary.json", summary)
    _compare(candidate, record, summary, claim)
    floors = settings["floors"]
    missed = [
        f"{k} = {_stat(summary, k):.3g} below floor {v}"
        for k, v in floors.items()
        if _stat(summary, k) < v
    ]
    assert not missed, "; ".join(missed)


def _compare(candidate, record, summary: dict, claim) -> None:
    """TP1 baseline ratios and the roofline fraction, recorded beside the samples."""
    baseline = candidate.spec.get("baseline")
    recorded = load_finding(baseline.get("finding"), record.evidence.root) if baseline else None
    record.evidence.write_json("throughput_comparison.json",
                               compare_baseline(summary, baseline, recorded))
    roof = roofline_for(candidate.model, candidate.gpus, record.identity.get("topology"),
                        candidate.tp, summary["decode_tok_s"]["median"])
    record.evidence.write_json("roofline.json", roof)
    if roof["computed"]:
        claim("decode_fraction_of_roofline", "roofline.json", op="field", path="fraction")


def _samples(record) -> list[dict]:
    from tp2qual.claims import read_records

    return [r for r in read_records(record.evidence.root / SAMPLES) if r["phase"] == "sample"]


def _stat(summary: dict, key: str) -> float:
    name, _, stat = key.rpartition("_")
    return summary[name][stat]
