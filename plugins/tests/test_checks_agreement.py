"""Gate 07's pure checks (tp2qual.checks.agreement) on real llama-cpp-python 0.3.36 answers
(plugins/tests/data/completions-echo/: a 64-token greedy decode and its echo reread) and on the
fault proxy's rewrites of them (completionfaults.py, what test_agreement_faults.py serves)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from completionfaults import completion_fault

from tp2qual.candidate import GATE_DEFAULTS
from tp2qual.checks.agreement import OWN, REFERENCE, REREAD, WARM
from tp2qual.checks.agreement.closeness import Closeness, Decode, compare, not_argmax
from tp2qual.checks.agreement.evaluate import evaluate
from tp2qual.checks.agreement.rows import after, aligned, decode_rows, reread_rows, text_of
from tp2qual.checks.agreement.scoring import Bounds, figures, judge, misread, shift_fit

DATA = Path(__file__).parent / "data" / "completions-echo"
SETTINGS = GATE_DEFAULTS["agreement"]
RULE = Closeness(5, 0.5, 1.0)


def _load(name: str) -> dict[str, Any]:
    return json.loads((DATA / name).read_text())


DECODE, REREAD_RAW = _load("decode.json"), _load("reread.json")
PROMPT = DECODE["request"]["prompt"]


def _decoded(data: dict[str, Any] = DECODE) -> tuple[list[dict[str, Any]], str]:
    choice = data["response"]["choices"][0]
    rows = decode_rows(choice["logprobs"])
    assert rows is not None
    return rows, choice["finish_reason"]


def _reread(shift: int = 1) -> list[dict[str, Any]]:
    rows = reread_rows(REREAD_RAW["response"]["choices"][0]["logprobs"], shift, 5)
    answer = after(rows or [], len(PROMPT))
    assert answer is not None
    return answer


def _lines(decode: dict[str, Any] = DECODE) -> list[dict[str, Any]]:
    rows, finish = _decoded(decode)
    text = decode["response"]["choices"][0]["text"]
    own = {"kind": OWN, "id": "p", "prompt": PROMPT, "text": text, "finish_reason": finish,
           "tokens": rows}  # fmt: skip
    reread = {"kind": REREAD, "of": "self", "id": "p", "tokens": _reread()}
    return [own, reread, {**own, "kind": WARM}]


def test_llama_cpp_echo_rows_are_one_row_late_and_read_back_exactly() -> None:
    """At shift 1 the reread gives every decoded token its decode-time logprob (the captures'
    README: 64 of 64); read at its own row (shift 0) it is far off."""
    rows, _ = _decoded()
    pairs = aligned(rows, _reread(1))
    found = figures(pairs, len(rows))
    assert found["positions"] + found["unreadable"] == len(rows) == 64
    assert found["mean_abs_delta"] == 0.0 and found["top1_agreement"] == 1.0
    wrong = figures(aligned(rows, _reread(0)), len(rows))
    assert wrong["mean_abs_delta"] > 1.0  # the engine's own token_logprobs column
    assert text_of(rows) == DECODE["response"]["choices"][0]["text"]


def test_a_misread_shift_is_seen_from_the_serves_own_reread() -> None:
    """Read at shift 0 (as a BOS-adding GGUF would need), llama.cpp's rows would misfit its own
    decode by nat: the gate raises that as the suite's error instead of judging the serve."""
    rows, _ = _decoded()
    fits = shift_fit(rows, REREAD_RAW["response"]["choices"][0]["logprobs"], PROMPT, 5)
    assert fits[1] == 0.0 and fits[0] is not None and fits[0] > 1.0
    assert misread(fits, 1) is None and misread(fits, 0) == 1


def test_a_reread_split_across_the_prompt_has_no_answer_rows() -> None:
    rows = [{"token": "ab", "logprob": -1.0, "top": []}, {"token": "c", "logprob": -1.0, "top": []}]
    assert after(rows, 2) == rows[1:] and after(rows, 1) is None and after(rows, 3) == []


def test_greedy_is_argmax_on_the_real_decode_and_not_when_it_takes_its_second_choice() -> None:
    rows, _ = _decoded()
    assert not_argmax(rows, SETTINGS["argmax_epsilon"]) == []
    faulted = completion_fault(
        "second_choice", DECODE["request"], copy.deepcopy(DECODE["response"])
    )
    bad, _ = _decoded({"response": faulted})
    found = not_argmax(bad, SETTINGS["argmax_epsilon"])
    assert [f["position"] for f in found][:2] == [16, 23]


def test_a_late_drift_consistent_with_its_text_passes_greedy_and_fails_its_reread() -> None:
    """late_drift keeps greedy looking like argmax; the serve's reread of that text gives the
    drifted tokens their real logprobs (here: the honest reread's, lowered as a drift shows)."""
    drifted = completion_fault("late_drift", DECODE["request"], copy.deepcopy(DECODE["response"]))
    rows, _ = _decoded({"response": drifted})
    assert not_argmax(rows, SETTINGS["argmax_epsilon"]) == []
    honest, _ = _decoded()
    reread = [dict(r, logprob=r["logprob"] - (1.5 if i % 7 == 2 else 0.0) if r["logprob"] else None)
              for i, r in enumerate(_reread())]  # fmt: skip
    verdict = judge(figures(aligned(honest, reread), 64), Bounds.from_settings(SETTINGS, "self"),
                    "self")  # fmt: skip
    assert not verdict.ok and "mean |Δ logprob| 0.221 (> 0.1)" in verdict.reason


def test_the_closeness_walk_judges_from_token_0_and_the_ends() -> None:
    rows, finish = _decoded()
    same = compare(Decode(rows, finish), Decode(rows, finish), RULE)
    assert same.ok and same.measures["exact"]
    moved = [dict(rows[0], logprob=rows[0]["logprob"] - 0.8), *rows[1:]]
    first = compare(Decode(moved, finish), Decode(rows, finish), RULE)
    assert not first.ok and first.measures["max_abs_delta_logprob"] == 0.8  # position 0 counts
    early = compare(Decode(rows[:32], "stop"), Decode(rows, finish), RULE)
    assert not early.ok and "stops after token 32 (stop)" in early.reason
    assert compare(Decode(rows, "stop"), Decode(rows, "length"), RULE).ok is False


def test_a_divergence_far_from_a_tie_fails_by_its_gap() -> None:
    a = {"token": "x", "logprob": -0.1, "top": [["x", -0.1], ["y", -2.5]]}
    b = {"token": "y", "logprob": -0.2, "top": [["y", -0.2], ["x", -2.4]]}
    verdict = compare(Decode([a], "length"), Decode([b], "length"), RULE)
    assert not verdict.ok and "no near tie, 2.400 nat apart" in verdict.reason
    near = {"token": "y", "logprob": -0.6, "top": [["y", -0.6], ["x", -0.8]]}
    tie = {"token": "x", "logprob": -0.7, "top": [["x", -0.7], ["y", -0.75]]}
    assert compare(Decode([tie], "length"), Decode([near], "length"), RULE).ok


def test_too_few_aligned_positions_is_not_judged_never_a_pass() -> None:
    verdict = judge(figures([], 10), Bounds.from_settings(SETTINGS, "self"), "self")
    assert verdict.ok and verdict.measures["judged"] is False
    assert verdict.measures["judgement"].startswith("not judged: 0 positions aligned")


def test_evaluate_without_a_reference_judges_self_and_says_the_rest_is_not_applicable() -> None:
    judged = evaluate(_lines(), SETTINGS)
    assert judged.problems == []
    assert judged.claims["self_judgement"] == "agrees" and judged.claims["self_mean_abs_delta"] == 0
    assert judged.claims["cached_prefix_agrees"] is True and judged.claims["greedy_not_argmax"] == 0
    assert judged.claims["agreement_judged"] is False  # nothing was compared with a reference
    assert "no reference transcript" in judged.claims["agreement_not_judged"]


def _warmed(shift: float, at: int = 9) -> list[dict[str, Any]]:
    """The real decode's lines with its warm copy's token ``at`` moved by ``shift`` nat."""
    lines = _lines()
    rows = copy.deepcopy(lines[2]["tokens"])
    row = rows[at]  # the whole row moved: its token stays its own argmax
    row["logprob"] -= shift
    row["top"] = [[token, value - shift] for token, value in row["top"]]
    return [*lines[:2], {**lines[2], "tokens": rows}]


def test_a_cached_prefix_is_held_to_its_own_bound_and_claims_its_figure() -> None:
    """Warm against cold at warm_max_abs_delta_logprob (0.4), no longer the self p99 (1.0):
    0.39 nat passes, 0.6 (a p 0.99 token given 0.54 warm) FAILs; a run recorded before the
    setting was judged at the self p99 and claimed no figure, and verify judges it as then."""
    assert SETTINGS["warm_max_abs_delta_logprob"] == 0.4
    held = evaluate(_warmed(0.39), SETTINGS)
    assert held.problems == [] and held.claims["cached_prefix_max_abs_delta"] == 0.39
    moved = evaluate(_warmed(0.6), SETTINGS)
    assert moved.claims["cached_prefix_agrees"] is False
    assert moved.claims["cached_prefix_max_abs_delta"] == 0.6
    assert any("with its prefix cached" in p and "(> 0.4)" in p for p in moved.problems)
    before = {k: v for k, v in SETTINGS.items() if k != "warm_max_abs_delta_logprob"}
    then = evaluate(_warmed(0.6), before)
    assert then.claims["cached_prefix_agrees"] is True  # at the self p99, 1.0
    assert "cached_prefix_max_abs_delta" not in then.claims


def test_evaluate_against_a_reference_teacher_forced() -> None:
    lines = _lines()
    ref = {**lines[0], "kind": REFERENCE, "candidate": "r", "run": "20261203T000000Z-ab12"}
    forced = {**lines[1], "of": "forced"}
    judged = evaluate([*lines, ref, forced], SETTINGS)
    assert judged.problems == [] and judged.claims["agrees_with_reference"] is True
    assert judged.claims["tf_judgement"] == "agrees" and judged.claims["exact_share"] == 1.0
    early = completion_fault("early_eos", DECODE["request"], copy.deepcopy(DECODE["response"]))
    cut = _lines({"request": DECODE["request"], "response": early})
    judged = evaluate([*cut, ref, forced], SETTINGS)
    assert judged.claims["agrees_with_reference"] is False
    assert any("stops after token 32" in p for p in judged.problems)


def test_accuracy_without_power_is_not_judged_in_the_claims() -> None:
    items = [{"kind": "accuracy", "id": f"a{i}", "items_sha256": "s", "correct": i < 1}
             for i in range(10)]  # fmt: skip
    theirs = [{**i, "kind": "reference_accuracy", "correct": n < 2} for n, i in enumerate(items)]
    lines = _lines()
    ref = {**lines[0], "kind": REFERENCE, "candidate": "r"}
    judged = evaluate([*lines, ref, {**lines[1], "of": "forced"}, *items, *theirs], SETTINGS)
    assert judged.claims["accuracy_judgement"].startswith("not judged: no power")
    assert judged.claims["accuracy_judged"] is False and "accuracy" in judged.not_judged
