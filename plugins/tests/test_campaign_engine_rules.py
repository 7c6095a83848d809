"""The campaign files against the engine rules of issue #20, rendered with no Docker engine and
no GPU: each rule is read from the pinned engine's source (docs/campaign.md, "Engine facts")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tp2qual.candidate import Candidate, load_candidates

CANDIDATES = Path(__file__).resolve().parents[2] / "candidates"
CAMPAIGN = [c for c in load_candidates([CANDIDATES]) if c.tp > 1]
IDS = [c.name for c in CAMPAIGN]


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize("cand", CAMPAIGN, ids=IDS)
def test_sglang_mxfp8_cache_runs_on_fa4(cand: Candidate) -> None:
    """SGLang 0.5.23: an mxfp8 cache makes Inkling pass q/k/v_descale, which only FA4 takes."""
    argv = cand.argv(port=1)
    if cand.engine == "sglang" and _flag(argv, "--kv-cache-dtype") == "mxfp8":
        assert _flag(argv, "--attention-backend") == "fa4"


@pytest.mark.parametrize("cand", CAMPAIGN, ids=IDS)
def test_vllm_draft_methods_name_their_draft_and_length(cand: Candidate) -> None:
    """vLLM 0.25.1 config/speculative.py: dflash/eagle/eagle3 build the draft from "model" and
    refuse a config without num_speculative_tokens."""
    spec = _flag(cand.argv(port=1), "--speculative-config")
    if cand.engine != "vllm" or spec is None:
        return
    config = json.loads(spec)
    if config.get("method") in ("dflash", "eagle", "eagle3"):
        assert config.get("model") and int(config.get("num_speculative_tokens", 0)) > 0


@pytest.mark.parametrize("cand", CAMPAIGN, ids=IDS)
def test_nccl_protocol_is_left_to_nccl(cand: Candidate) -> None:
    """LL128 forced on PCIe without NVLink is exercised by no gate: NCCL's tuner chooses."""
    assert "NCCL_PROTO" not in cand.env()


def test_the_lanes_changed_what_they_must() -> None:
    by_name = {c.name: c for c in CAMPAIGN}
    lane = by_name["inkling-small-nvfp4-mxfp8kv"].argv(port=1)
    assert _flag(lane, "--attention-backend") == "fa4"
    dflash = json.loads(
        _flag(by_name["laguna-s-2.1-nvfp4-dflash"].argv(port=1), "--speculative-config") or "{}"
    )
    draft = by_name["laguna-s-2.1-nvfp4-dflash"].model["draft"]
    assert dflash["model"] == draft["repo"] == "poolside/Laguna-S-2.1-DFlash-NVFP4"
    assert "revision" in dflash  # filled from [model.draft] (test_draft_pin.py)
