"""Gate 02 — model list.

Pass means: ``GET /v1/models`` lists exactly the served name (no alias, no path, nothing else),
and where the engine reports a context length (vLLM's ``max_model_len``), it equals the bounded
context of the candidate; the engine reports the version the candidate states (the same
release: a builder's local label after ``+``, as NGC's vLLM images append, is recorded, not
judged; ``checks.model_list.same_version``). The raw response is the artifact.

Recorded beside the pass, never judged: which kernels the engine chose, in its own server-log
lines (``checks/kernels.py``; the lines and their sources in ``tp2qual.engines``), claimed as
``kernels_chosen`` from ``kernels_chosen.json``, and where a backend flag asked for another,
``kernel_notices``. Here because this gate runs for every candidate (TP1 too, unlike gate 01)
right after the server is ready, and says what the engine is: the name, the bound, the version,
and now the kernels.
"""

from __future__ import annotations

from typing import Any

import pytest

from tp2qual.checks import kernels, model_list
from tp2qual.checks.verdict import NotJudged
from tp2qual.engines import engine_for
from tp2qual.gates import Api, Candidate, CandidateRecord, Claimer, Exchange, Server

pytestmark = pytest.mark.model_list


def test_lists_exactly_the_served_name(
    api: Api, server: Server, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    listing = api.request(model_list.LISTING, "GET", "/v1/models", timeout=10)
    verdict = model_list.judge_listing(_recorded(listing), candidate.served_name)
    assert verdict.ok, verdict.reason
    claim("served_model", "model_list.jsonl", op="field", path="response.data.0.id")
    _record_kernels(server, candidate, record, claim)


def _recorded(listing: Exchange) -> dict[str, Any]:
    """The exchange as ``model_list.jsonl`` keeps it, which verify judges again."""
    return {"status": listing.status, "response": listing.body}


def _record_kernels(
    server: Server, candidate: Candidate, record: CandidateRecord, claim: Claimer
) -> None:
    """What the engine's log says it chose (a record: it fails nothing)."""
    text = server.log_text()
    lines = text[: text.rfind("\n") + 1].splitlines()  # whole lines only: verify reads the same
    kept = kernels.record(engine_for(candidate.engine), lines, candidate.command)
    record.evidence.write_json(kernels.ARTIFACT, kept)
    claim("kernels_chosen", kernels.ARTIFACT, op="field", path="summary")
    if kept["notices"]:
        claim("kernel_notices", kernels.ARTIFACT, op="field", path="notices")


def test_reported_context_is_the_bound(api: Api, candidate: Candidate, claim: Claimer) -> None:
    listing = api.request(model_list.CONTEXT, "GET", "/v1/models", timeout=10)
    verdict = model_list.judge_context(
        _recorded(listing), candidate.max_model_len, candidate.engine
    )
    if isinstance(verdict, NotJudged):
        pytest.skip(verdict.reason)
    assert verdict.ok, verdict.reason
    claim("max_model_len", "model_list.jsonl", op="field", path="response.data.0.max_model_len")


def test_engine_is_the_stated_version(
    server: Server, candidate: Candidate, record: CandidateRecord
) -> None:
    """The engine says what it is (vLLM ``/version``, SGLang ``/server_info``; llama.cpp: the
    package in ``launch.python`` or the image label), and it is the version the candidate
    states. It reads what the server's start recorded, so it needs the server: a start that
    failed (the suite's fault or the candidate's) is that, never a missing version."""
    stated = candidate.spec["engine"].get("version")
    verdict = model_list.judge_version(record.identity.get("engine") or {}, stated)
    if isinstance(verdict, NotJudged):
        pytest.skip(verdict.reason)
    assert verdict.ok, verdict.reason
