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

The user's capacity protocol (``[gates.throughput.protocol]``, ``perf/protocol.py``): a candidate
that names it runs that request shape instead of the single-stream samples — ``requests`` requests
at c1, each a prompt of ``prompt_tokens`` actual tokens by the engine's own count (calibrated as
gate 06 calibrates), capped at ``max_tokens``, streamed with usage — and records per request the
prompt tokens, TTFO (first output of either channel), first-visible TTFT, effective prefill rate
(prompt tokens / TTFO, queueing included) and decode rate (from the first output, which under
``capacity-v3`` is the first visible content), with their statistics. Pass means every request
completed with visible content and usage. No floor is judged on it: it is put beside the dated
records the profile names (``protocol_beside.json``), divided only where the record is of the
same serve, protocol, TP size and cap with a prompt within ``prompt_tolerance``
(``perf/protocol_compare.py``), shown with the reason otherwise. It is switched on by a lane file
(``[lane] after = <baseline>``, launch unchanged), not in the baseline: the baseline's verdict and
its floors, sized on its own short prompt, stay as they were; the protocol runs only once that
serve has passed (a wrong serve is never timed); and the user runs it, or leaves it, by its name.
Artifacts: ``protocol_samples.jsonl``, ``protocol_summary.json``, ``protocol_records/`` (each
record's raw JSON, its pinned sha256 checked), ``protocol_beside.json``.
"""

from __future__ import annotations

import pytest

from tp2qual.artifacts.claims import read_records
from tp2qual.evidence.protocol_records import copy_name, parsed, read_record
from tp2qual.evidence.run_floors import RunBases, run_bases
from tp2qual.evidence.throughput_reference import THROUGHPUT_REFERENCE, as_record
from tp2qual.exceptions import SuiteError
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer
from tp2qual.hooks.candidates import run_key
from tp2qual.perf.floors import FLOORS_FILE, FloorNotDerived, derive_floors, misses
from tp2qual.perf.protocol import protocol_problems
from tp2qual.perf.protocol import summary as protocol_summary
from tp2qual.perf.protocol_compare import beside
from tp2qual.perf.protocol_requests import run_request, sentences_for
from tp2qual.perf.sampling import FIGURES, summary
from tp2qual.perf.server_timings import ServerWindow
from tp2qual.perf.throughput import measure, request_body

pytestmark = pytest.mark.throughput

SAMPLES = "throughput_samples.jsonl"
PROTOCOL_SAMPLES = "protocol_samples.jsonl"
PROTOCOL_SUMMARY = "protocol_summary.json"
PROTOCOL_BESIDE = "protocol_beside.json"


def test_single_stream_samples(
    api: Api,
    candidate: Candidate,
    record: CandidateRecord,
    claim: Claimer,
    request: pytest.FixtureRequest,
) -> None:
    settings = candidate.gate("throughput")
    if "protocol" in settings:
        pytest.skip(f"runs the {settings['protocol']['name']} protocol instead (its profile)")
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


def test_capacity_protocol(
    api: Api, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    profile = candidate.gate("throughput").get("protocol")
    if profile is None:
        pytest.skip("no capacity protocol named ([gates.throughput.protocol])")
    sentences, line = sentences_for(api, candidate, profile["prompt_tokens"])
    record.evidence.write_json(
        PROTOCOL_SUMMARY, {"profile": profile, "sentences": sentences, "calibration": vars(line)}
    )
    for n in range(profile["requests"]):
        row = {"i": n, **run_request(api, candidate, profile, sentences, n)}
        record.evidence.append_jsonl(PROTOCOL_SAMPLES, row)
        assert row["ok"], f"request {n}: {row['reason']}"
    rows = read_records(record.evidence.root / PROTOCOL_SAMPLES)
    stats = protocol_summary(rows)
    record.evidence.write_json(
        PROTOCOL_SUMMARY,
        {"profile": profile, "sentences": sentences, "calibration": vars(line), "summary": stats},
    )
    claim("protocol_requests", PROTOCOL_SAMPLES, op="count", where={"ok": True})
    for name in stats:
        claim(f"protocol_{name}_median", PROTOCOL_SAMPLES, op="median", field=name)
    record.evidence.write_json(PROTOCOL_BESIDE, _beside(candidate, record, profile, rows))
    wrong = protocol_problems(profile["name"], rows)
    assert not wrong, "; ".join(wrong)


def _beside(
    candidate: Candidate, record: CandidateRecord, profile: dict, rows: list[dict]
) -> list[dict]:
    """Each named record, copied into the evidence, beside this run (or why it is not)."""
    after = candidate.spec.get("lane", {}).get("after")
    serves = [candidate.name, *([after] if after else [])]
    out = []
    for entry in profile.get("records", []):
        raw, why = read_record(entry, candidate.path.parent)
        body = parsed(raw) if raw is not None else None
        if body is None:
            out.append({"record": entry, "divided": False, "not_divided_because": [why or
                        "the record is not a JSON object"]})  # fmt: skip
            continue
        record.evidence.write_text(copy_name(entry), raw.decode())
        out.append(beside(profile, serves, candidate.tp, rows, entry, body))
    return out


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
