"""Gate 08 — single-stream throughput.

Runs only after every functional gate passed (a corrupt server is not benchmarked). Pass means:
after a discarded warm-up, at least five streamed samples, one request at a time, with a fixed
prompt and output length, each yielding TTFT, TPOT, inter-chunk gaps, decode tokens/s and
end-to-end time (definitions in ``tp2qual.sampling``); the statistics (mean, median, stdev,
p90/p99, 95 % CI) derived from the samples; and every floor met in its direction (rates ≥,
latencies ≤: ``tp2qual.perf.floors``), each floor written in the candidate or derived from
evidence — its TP1 reference's or its lane baseline's measured figure (this run's PASS, else the
newest earlier dated one), the dated TP1 figure, the roofline, or the rule's fallback — with its
source and the basis it rests on; a candidate with no floor says so, never "floors met"; a floor
this run's evidence cannot derive is a suite error (not judged), never the candidate's FAIL. Beside
the samples: the engine's own timings over the same window (vLLM/SGLang ``/metrics``
histograms, llama.cpp's per-request perf log), ratios to the candidate's dated TP1 baseline
(corroborated only by a local finding) and the decode rate as a fraction of the GPUs' roofline.
Artifacts: ``throughput_samples.jsonl`` (one line per request), ``throughput_summary.json``,
``server_timings.json``, ``throughput_comparison.json``, ``roofline.json``,
``throughput_reference.json`` (the measured figures a floor was derived from, copied),
``throughput_floors.json``.
"""

from __future__ import annotations

import pytest

from tp2qual.artifacts.claims import read_records
from tp2qual.evidence.run_floors import RunBases, run_bases
from tp2qual.evidence.throughput_reference import THROUGHPUT_REFERENCE, as_record
from tp2qual.exceptions import SuiteError
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer
from tp2qual.hooks.candidates import run_key
from tp2qual.perf.floors import FLOORS_FILE, FloorNotDerived, derive_floors, misses
from tp2qual.perf.sampling import FIGURES, summary
from tp2qual.perf.server_timings import ServerWindow
from tp2qual.perf.throughput import measure, request_body

pytestmark = pytest.mark.throughput

SAMPLES = "throughput_samples.jsonl"


def test_single_stream_samples(
    api: Api,
    candidate: Candidate,
    record: CandidateRecord,
    claim: Claimer,
    request: pytest.FixtureRequest,
) -> None:
    settings = candidate.gate("throughput")
    runs = [("warmup", i) for i in range(settings["warmup"])]
    runs += [("sample", i) for i in range(settings["samples"])]
    window = ServerWindow(api, candidate)
    for n, (phase, i) in enumerate(runs):
        if n == settings["warmup"]:
            window.open()  # the engine's own counters cover exactly the measured samples
        got = measure(
            api,
            f"{phase}#{i}",
            request_body(candidate, settings, n),
            candidate.served_name,
            settings["finish_reasons"],
        )
        record.evidence.append_jsonl(SAMPLES, {"phase": phase, "i": i, **got.figures})
        assert got.stream.status == 200, (
            f"{phase} {i}: HTTP {got.stream.status}: {got.stream.error_body}"
        )
        assert got.figures["ok"], f"{phase} {i}: {got.figures.get('reason', 'under 2 tokens')}"
    stats = summary(_samples(record))
    record.evidence.write_json("throughput_summary.json", stats)
    record.evidence.write_json("server_timings.json", window.close(stats))
    for name in FIGURES:
        for stat in ("median", "mean"):
            claim(f"{name}_{stat}", SAMPLES, op=stat, field=name, where={"phase": "sample"})
    claim("samples", SAMPLES, op="count", where={"phase": "sample"})
    bases = _compare(run_bases(request.config.stash[run_key], record, stats), record, claim)
    try:
        judged = derive_floors(settings, bases.comparison, bases.roofline, bases.measured)
    except (
        FloorNotDerived
    ) as exc:  # no basis to judge by: the suite cannot judge, the serve is not wrong
        record.evidence.write_json(FLOORS_FILE, {"count": 0, "not_derived": list(exc.problems)})
        raise SuiteError(
            f"throughput floor(s) not derived, so not judged: {exc}", candidate=candidate.name
        ) from None
    record.evidence.write_json(FLOORS_FILE, judged.as_dict())
    claim("floors_judged", FLOORS_FILE, op="field", path="count")  # 0: none set, said so
    claim("floor_bases", FLOORS_FILE, op="field", path="bases")  # which basis each rests on
    missed = misses(judged.floors, _samples(record))
    assert not missed, "; ".join(missed)


def _compare(bases: RunBases, record: CandidateRecord, claim: Claimer) -> RunBases:
    """TP1 baseline ratios, the roofline fraction and the measured bases (copied), recorded
    beside the samples."""
    record.evidence.write_json("throughput_comparison.json", bases.comparison)
    record.evidence.write_json("roofline.json", bases.roofline)
    if bases.roofline["computed"]:
        claim("decode_fraction_of_roofline", "roofline.json", op="field", path="fraction")
    if bases.measured:
        record.evidence.write_json(THROUGHPUT_REFERENCE, as_record(bases.measured))
    return bases


def _samples(record: CandidateRecord) -> list[dict]:
    return [r for r in read_records(record.evidence.root / SAMPLES) if r["phase"] == "sample"]
