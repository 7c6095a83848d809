"""Room on disk: what a run will write, gate by gate at each candidate's real bound, against the
results folder's free space. Pure: candidates' settings and a free-byte figure in, a Verdict out.

A full disk in the middle of a run loses evidence, the one thing the suite must not lose. The
figures per token and per position were measured on a real run (CI, 2026-12-04, run
20261204T212428Z-c707, smollm2-135m-local on llama.cpp, bound 2048, top_n 5):
``agreement.jsonl`` 642,997 bytes, of which the echo of the near-bound prompt (1,554 positions,
each with its top-5 logprobs) was 328,781 bytes: 212 bytes a position; ``agreement_transcript
.jsonl`` 275,737 bytes beside it (x0.43); ``capacity.jsonl`` 24,300 bytes for prompts of 0.9 and
1.25 times the bound (4,403 tokens: 5.5 bytes a token); ``throughput.jsonl`` 220,157 bytes for
6 streamed requests of 128 tokens (287 bytes a streamed token); everything else but the server
log 84 KB.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tp2qual.checks.verdict import Verdict

MIB = 1024**2
BYTES_PER_POSITION_TOP5 = 212  # one prompt position with its top-5 logprobs, as JSON
TRANSCRIPT_SHARE = 0.43  # agreement_transcript.jsonl beside agreement.jsonl
SHORT_PROMPTS_BYTES = 512 * 1024  # gate 07's short prompts and accuracy items (measured ~300 KB)
BYTES_PER_PROMPT_TOKEN = 5.5  # a long prompt's text in the request, JSON-escaped
BYTES_PER_STREAMED_TOKEN = 290  # one SSE chunk recorded
BYTES_PER_ANSWER_TOKEN = 8  # an answer's text in a non-streamed response
# A server log is the engine's: a TP2 serve with NCCL_DEBUG=INFO writes a few MB; allowed for.
SERVER_LOG_BYTES = 16 * MIB
FIXED_BYTES = 1 * MIB  # finding, identity, launch, topology, manifests (measured 84 KB)
# Room kept free beyond the estimate: a quarter of it, and never less than 64 MiB (the report,
# the manifest rewritten after every gate, the filesystem's own needs).
MARGIN_SHARE, MARGIN_MIN = 0.25, 64 * MIB


def agreement_bytes(bound: int, settings: Mapping[str, Any], has_reference: bool) -> int:
    """Gate 07 keeps prompt logprobs at every position of the near-bound reread; a reference
    doubles it (its answers teacher-forced, the reference's own record read back)."""
    top_n = int(settings.get("top_n", 5))
    per_position = BYTES_PER_POSITION_TOP5 * (1 + top_n) / 6
    positions = float(settings.get("near_bound_fill", 0.75)) * bound
    one = positions * per_position + SHORT_PROMPTS_BYTES
    return int(one * (1 + TRANSCRIPT_SHARE) * (2 if has_reference else 1))


def capacity_bytes(bound: int, settings: Mapping[str, Any]) -> int:
    over = float(settings.get("over_by", 1.25)) * (2 if settings.get("stream_over_bound") else 1)
    return int((float(settings.get("fill", 0.9)) + over) * bound * BYTES_PER_PROMPT_TOKEN)


def throughput_bytes(settings: Mapping[str, Any]) -> int:
    requests = int(settings.get("samples", 5)) + int(settings.get("warmup", 1))
    return requests * int(settings.get("max_tokens", 128)) * BYTES_PER_STREAMED_TOKEN


def answers_bytes(gate: Mapping[str, Mapping[str, Any]]) -> int:
    """Gates 03-05: non-streamed answers at their token budgets (small beside 06-08)."""
    det, rep, tools = gate["deterministic"], gate["repetition"], gate["tool_calls"]
    tokens = (
        int(det.get("repeats", 3))
        * max(1, len(det.get("prompts") or []))
        * int(det.get("max_tokens", 48))
    )
    tokens += max(1, len(rep.get("prompts") or [])) * int(rep.get("max_tokens", 512))
    tokens += len(tools.get("modes") or []) * int(tools.get("max_tokens", 128)) * 4  # streamed
    return tokens * BYTES_PER_ANSWER_TOKEN


def estimate(
    bound: int, gate: Mapping[str, Mapping[str, Any]], has_reference: bool
) -> dict[str, int]:
    """Bytes one candidate's run writes, by what writes them."""
    return {
        "fixed": FIXED_BYTES,
        "server_log": SERVER_LOG_BYTES,
        "answers_03_05": answers_bytes(gate),
        "capacity_06": capacity_bytes(bound, gate["capacity"]),
        "agreement_07": agreement_bytes(bound, gate["agreement"], has_reference),
        "throughput_08": throughput_bytes(gate["throughput"]),
    }


def margin(need: int) -> int:
    return max(MARGIN_MIN, int(need * MARGIN_SHARE))


def judge(estimates: Mapping[str, Mapping[str, int]], free: int, folder: str) -> Verdict:
    """Refused when the folder has less room than the run's estimate plus the margin, naming
    both figures and the candidate that writes the most."""
    need = sum(sum(e.values()) for e in estimates.values())
    keep = margin(need)
    per = {name: sum(e.values()) for name, e in estimates.items()}
    measures = {
        "folder": folder,
        "free_bytes": free,
        "estimate_bytes": need,
        "margin_bytes": keep,
        "per_candidate_bytes": per,
        "estimates": dict(estimates),
    }
    if free >= need + keep:
        return Verdict.passed(**measures)
    largest = max(per, key=lambda n: per[n]) if per else "none"
    return Verdict.failed(
        f"the results folder {folder} has {free / MIB:.1f} MiB free; this run will write about"
        f" {need / MIB:.1f} MiB ({len(per)} candidate(s), the most {largest}:"
        f" {per.get(largest, 0) / MIB:.1f} MiB) plus a margin of {keep / MIB:.0f} MiB: free"
        " room there, or point --results at a folder with room",
        **measures,
    )
