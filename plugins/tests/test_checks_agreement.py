"""The agreement rule (tp2qual.checks.agreement) on hand-made transcripts: exact, near-tie,
a real divergence, a moved distribution, one side stopping early, and the claims re-derived
from a transcript's records."""

from __future__ import annotations

from typing import Any

from tp2qual.candidate import GATE_DEFAULTS
from tp2qual.checks.agreement import (
    Tolerances,
    compare,
    judge,
    rederive,
    tokens_from_logprobs,
)

DEFAULTS = Tolerances.from_mapping(GATE_DEFAULTS["agreement"])


def tok(token: str, logprob: float, *others: tuple[str, float]) -> dict[str, Any]:
    return {"token": token, "logprob": logprob, "top": [[token, logprob], *map(list, others)]}


PARIS = [tok("The", -0.1), tok(" capital", -0.2), tok(" is", -0.05), tok(" Tokyo", -0.3)]


def test_identical_outputs_agree_exactly() -> None:
    verdict = compare(PARIS, PARIS, DEFAULTS)
    assert verdict.ok and verdict.measures["exact"]
    assert verdict.measures["divergence"] is None
    assert verdict.measures["max_abs_delta_logprob"] == 0.0


def test_near_tie_inside_each_others_top_n_agrees() -> None:
    """The measured TP1/TP2 shape: the argmax flips on a near-tie, each token in the other's
    top 5, and logprobs over the common prefix within 0.17."""
    own = [tok("The", -0.1), tok(" city", -0.70, (" capital", -0.71))]
    ref = [tok("The", -0.27), tok(" capital", -0.69, (" city", -0.70))]
    verdict = compare(own, ref, DEFAULTS)
    assert verdict.ok, verdict.reason
    assert not verdict.measures["exact"]
    div = verdict.measures["divergence"]
    assert (div["position"], div["own_token"], div["ref_token"]) == (1, " city", " capital")
    assert div["own_in_ref_top"] and div["ref_in_own_top"]
    assert verdict.measures["max_abs_delta_logprob"] == 0.17


def test_divergence_outside_the_top_n_fails_and_says_where() -> None:
    own = [tok("The", -0.1), tok(" Lyon", -0.2)]
    ref = [tok("The", -0.1), tok(" Paris", -0.1, (" France", -3.0))]
    verdict = compare(own, ref, DEFAULTS)
    assert not verdict.ok
    assert "diverges at token 1" in verdict.reason and "' Lyon'" in verdict.reason
    assert "not in the reference's top 5" in verdict.reason


def test_same_tokens_with_moved_logprobs_fail() -> None:
    """Same argmax at every step, a different distribution (vllm #52938's shape)."""
    moved = [{**t, "logprob": t["logprob"] - 0.9} for t in PARIS]
    verdict = compare(moved, PARIS, DEFAULTS)
    assert not verdict.ok and verdict.measures["exact"]
    assert "|Δ logprob| 0.900" in verdict.reason


def test_one_side_stopping_early_is_no_divergence() -> None:
    verdict = compare(PARIS[:2], PARIS, DEFAULTS)
    assert verdict.ok and not verdict.measures["exact"]
    assert verdict.measures["common_prefix"] == 2


def test_share_that_agrees_exactly_against_its_floor() -> None:
    own = [{"id": "a", "tokens": PARIS}, {"id": "b", "tokens": PARIS[:2]}]
    ref = [{"id": "a", "tokens": PARIS}, {"id": "b", "tokens": PARIS}]
    lines, verdict = judge(own, ref, DEFAULTS)
    assert verdict.ok and verdict.measures["exact_share"] == 0.5
    assert [line["exact"] for line in lines] == [True, False]
    strict = Tolerances(top_n=5, max_abs_delta_logprob=0.0, min_exact_share=1.0)
    _, verdict = judge(own, ref, strict)
    assert not verdict.ok and "1/2 prompts agree exactly" in verdict.reason


def test_a_prompt_missing_from_the_reference_fails() -> None:
    _, verdict = judge([{"id": "a", "tokens": PARIS}], [{"id": "z", "tokens": PARIS}], DEFAULTS)
    assert not verdict.ok and "no such prompt" in verdict.reason


def test_openai_logprobs_become_transcript_tokens() -> None:
    logprobs = {
        "content": [
            {
                "token": "Tok",
                "logprob": -0.5,
                "bytes": None,
                "top_logprobs": [
                    {"token": "Tok", "logprob": -0.5},
                    {"token": "To", "logprob": -1.2},
                ],
            }
        ]
    }
    assert tokens_from_logprobs(logprobs) == [
        {"token": "Tok", "logprob": -0.5, "top": [["Tok", -0.5], ["To", -1.2]]}
    ]
    assert tokens_from_logprobs(None) == []
    assert tokens_from_logprobs({"content": [{"token": "x"}]}) == []  # no logprob: not judged


def test_claims_rederive_from_the_transcript_alone() -> None:
    own = [{"kind": "transcript", "id": "a", "prompt_set_sha256": "ab", "tokens": PARIS}]
    assert rederive(own, GATE_DEFAULTS["agreement"]) == {
        "agreement_prompts": 1,
        "prompt_set_sha256": "ab",
    }
    ref = [
        {"kind": "reference", "id": "a", "candidate": "r", "run": "20261201", "source": "this run"}
        | {"tokens": PARIS}
    ]
    summary = {"kind": "summary", "exact_share": 0.0}  # lines the rule ignores
    claims = rederive([*own, *ref, summary], GATE_DEFAULTS["agreement"])
    assert claims == {
        "agreement_prompts": 1,
        "prompt_set_sha256": "ab",
        "reference_candidate": "r",
        "reference_run": "20261201",
        "reference_source": "this run",
        "agrees_with_reference": True,
        "exact_share": 1.0,
        "max_abs_delta_logprob": 0.0,
    }
